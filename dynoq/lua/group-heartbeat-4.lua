--[[ group-heartbeat: record a member's heartbeat, drop members whose heartbeat is older
  than their TTL, and return the group's members (every member rebalances from this list).
  A queue is consumed by one group at a time: the group holds the queue's claim while any
  member heartbeats; another group is refused until the claim lapses.
  KEYS[1] members (zset member -> last heartbeat ms, Redis clock)
  KEYS[2] ttls (hash member -> TTL ms)
  KEYS[3] registry (set of the queue's groups: the sweeper's reaper walks it)
  KEYS[4] claim (the group consuming the queue, expiring TTL ms after its last heartbeat)
  ARGV[1] group name  ARGV[2] member  ARGV[3] member TTL ms
  ARGV[4] group channel (PUBLISHed when a member joined or was dropped)
  returns: {1 if the member is new else 0, members dropped, member, member, ...},
           or CONFLICT (another group holds the queue; nothing was written)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/members.lua
  flags: allow-oom
]]
if not (#KEYS == 4 and #ARGV == 4 and int(ARGV[3], 1, MAX_MS)) then return BOUNDS end
local owner = redis.call('GET', K.claim)
if owner and owner ~= ARGV[1] then return CONFLICT end
redis.call('SET', K.claim, ARGV[1], 'PX', ARGV[3])
local now = now_ms()
local joined = redis.call('ZADD', K.members, now, ARGV[2])
redis.call('HSET', K.ttls, ARGV[2], ARGV[3])
redis.call('SADD', K.registry, ARGV[1])
local dropped, alive = drop_stale(K.members, K.ttls, now)
local out = {joined, dropped}
for _, member in ipairs(alive) do out[#out + 1] = member end
if joined == 1 or dropped > 0 then redis.call('PUBLISH', ARGV[4], 'change') end
return out
