--[[ chaos soak: record one handler call, on the shard's node, at once.
  KEYS[1] what fences the delivery (dynoq's; only read): an ordered shard's lease key, or
          a keyed shard's kfence hash (message groups: a fence per key)
  KEYS[2] the soak's record hash of that shard (same hash tag, so same node)
  ARGV[1] a unique id of this handler call (a resent call keeps the first record)
  ARGV[2] the delivery's lease value, or its key's fence when ARGV[4] is set
          ("" = the message came unfenced)
  ARGV[3] what the handler knows (benchmarks/chaos_check.py: handling_value)
  ARGV[4] the message's key on a keyed queue ("" otherwise)
  returns: 1, or an error when the delivery's lease or key fence is no longer current:
  this store is fenced, as docs/consumer.md and docs/groups.md ask of a handler's writes
  (a handler that started in time and whose write arrives after a takeover, e.g. held up
  by a server restart, can do no harm). The refused write is kept as a record whose held
  is "r": the soak counts it, and the handler fails (the message is retried).
  The record is "<server time us>|<held>|ARGV[3]"; held is 1 when the fence is current,
  "r" when it is not (refused), "" when the message came unfenced.
]]
local t = redis.call('TIME')
local held = ''
if ARGV[2] ~= '' then
  local now
  if ARGV[4] ~= '' then
    now = redis.call('HGET', KEYS[1], ARGV[4]) or '1'  -- absent until a first takeover
  else
    now = redis.call('GET', KEYS[1])
  end
  if now == ARGV[2] then held = '1' else held = 'r' end
end
local at = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSETNX', KEYS[2], ARGV[1], at .. '|' .. held .. '|' .. ARGV[3])
if held == 'r' then return redis.error_reply('FENCED the delivery was taken over') end
return 1
