--[[ group-leave: remove a member from its group at once (a clean stop).
  KEYS[1] members zset  KEYS[2] member TTL hash
  ARGV[1] member  ARGV[2] group channel (PUBLISHed so the others rebalance now)
  returns: 1 removed, 0 it was not a member
]]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], 'change')
return removed
