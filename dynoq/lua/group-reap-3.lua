--[[ group-reap: drop members whose heartbeat is older than their TTL (the sweeper's step);
  forget the group in the registry once it has no member.
  KEYS[1] members  KEYS[2] ttls  KEYS[3] registry (set of the queue's groups)
  ARGV[1] group name  ARGV[2] group channel (PUBLISHed when a member was dropped)
  returns: members dropped
  uses: lib/bounds.lua lib/clock.lua lib/members.lua
  flags: allow-oom
]]
if not (#KEYS == 3 and #ARGV == 2) then return BOUNDS end
local dropped = drop_stale(K.members, K.ttls, now_ms())
if redis.call('ZCARD', K.members) == 0 then
  redis.call('SREM', K.registry, ARGV[1])
  redis.call('UNLINK', K.ttls)
end
if dropped > 0 then redis.call('PUBLISH', ARGV[2], 'change') end
return dropped
