--[[ group-reap: drop members whose heartbeat is older than their TTL (the sweeper's step);
  forget the group in the registry once it has no member.
  KEYS[1] members  KEYS[2] ttls  KEYS[3] registry (set of the queue's groups)
  ARGV[1] group name  ARGV[2] group channel (PUBLISHed when a member was dropped)
  returns: members dropped
  uses: lib/bounds.lua lib/clock.lua lib/members.lua
  flags: allow-oom
]]
local members, ttls, registry = KEYS[1], KEYS[2], KEYS[3]
if not (#KEYS == 3 and #ARGV == 2) then return BOUNDS end
local dropped = drop_stale(members, ttls, now_ms())
if redis.call('ZCARD', members) == 0 then
  redis.call('SREM', registry, ARGV[1])
  redis.call('UNLINK', ttls)
end
if dropped > 0 then redis.call('PUBLISH', ARGV[2], 'change') end
return dropped
