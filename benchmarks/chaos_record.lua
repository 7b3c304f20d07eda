--[[ chaos soak: record one handler call, on the shard's node, at once.
  KEYS[1] the shard's lease key (dynoq's; only read)
  KEYS[2] the soak's record hash of that shard (same hash tag, so same node)
  ARGV[1] a unique id of this handler call (a resent call keeps the first record)
  ARGV[2] the delivery's lease token ("" = the message came without a lease)
  ARGV[3] what the handler knows (benchmarks/chaos_check.py: handling_value)
  returns: 1, or an error when the lease key no longer holds the delivery's token: this
  store is fenced, as docs/consumer.md asks of a handler's writes (a handler that
  started under its lease and whose write arrives after the lease moved on, e.g. held up
  by a server restart, can do no harm). The refused write is kept as a record whose
  held is "r": the soak counts it, and the handler fails (the message is retried).
  The record is "<server time us>|<held>|ARGV[3]"; held is 1 when the lease key still
  holds the delivery's token, "r" when it does not (refused), "" without a lease.
]]
local t = redis.call('TIME')
local held = ''
if ARGV[2] ~= '' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then held = '1' else held = 'r' end
end
local at = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSETNX', KEYS[2], ARGV[1], at .. '|' .. held .. '|' .. ARGV[3])
if held == 'r' then return redis.error_reply('FENCED the lease moved on') end
return 1
