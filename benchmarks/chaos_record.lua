--[[ chaos soak: record one handler call, on the shard's node, at once.
  KEYS[1] the shard's lease key (dynoq's; only read)
  KEYS[2] the soak's record hash of that shard (same hash tag, so same node)
  ARGV[1] a unique id of this handler call (a resent call keeps the first record)
  ARGV[2] the delivery's lease token ("" = the message came without a lease)
  ARGV[3] what the handler knows (benchmarks/chaos_check.py: handling_value)
  returns: 1
  The record is "<server time us>|<held>|ARGV[3]"; held is 1 when the lease key still
  holds the delivery's token, 0 when it does not, "" without a lease.
]]
local t = redis.call('TIME')
local held = ''
if ARGV[2] ~= '' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then held = '1' else held = '0' end
end
local at = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('HSETNX', KEYS[2], ARGV[1], at .. '|' .. held .. '|' .. ARGV[3])
return 1
