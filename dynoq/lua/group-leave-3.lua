--[[ group-leave: remove a member from its group at once (a clean stop); the last member
  out gives the queue's claim back, so another group may consume it.
  KEYS[1] members  KEYS[2] ttls  KEYS[3] claim
  ARGV[1] member  ARGV[2] group channel (PUBLISHed so the others rebalance now)
  ARGV[3] group name
  returns: 1 removed, 0 it was not a member
  uses: lib/bounds.lua
  flags: allow-oom
]]
if not (#KEYS == 3 and #ARGV == 3) then return BOUNDS end
local removed = redis.call('ZREM', K.members, ARGV[1])
redis.call('HDEL', K.ttls, ARGV[1])
if redis.call('ZCARD', K.members) == 0 and redis.call('GET', K.claim) == ARGV[3] then
  redis.call('UNLINK', K.claim)
end
redis.call('PUBLISH', ARGV[2], 'change')
return removed
