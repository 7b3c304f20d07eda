--[[ group-heartbeat: record a member's heartbeat, drop members whose heartbeat is older
  than their TTL, and return the group's members (every member rebalances from this list).
  KEYS[1] members zset (member -> last heartbeat ms, Redis clock)
  KEYS[2] member TTL hash (member -> TTL ms)
  KEYS[3] registry set of the queue's groups (the sweeper's reaper walks it)
  ARGV[1] group name  ARGV[2] member  ARGV[3] member TTL ms
  ARGV[4] group channel (PUBLISHed when a member joined or was dropped)
  returns: {1 if the member is new else 0, members dropped, member, member, ...}
]]
local members, ttls, registry = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local joined = redis.call('ZADD', members, now, ARGV[2])
redis.call('HSET', ttls, ARGV[2], ARGV[3])
redis.call('SADD', registry, ARGV[1])
-- Groups are small (tens of members): check each one's own TTL.
local all = redis.call('ZRANGE', members, 0, -1, 'WITHSCORES')
local out, dropped = {joined, 0}, 0
for i = 1, #all, 2 do
  local ttl = tonumber(redis.call('HGET', ttls, all[i]) or '0')
  if tonumber(all[i + 1]) + ttl < now then
    redis.call('ZREM', members, all[i])
    redis.call('HDEL', ttls, all[i])
    dropped = dropped + 1
  else
    out[#out + 1] = all[i]
  end
end
out[2] = dropped
if joined == 1 or dropped > 0 then redis.call('PUBLISH', ARGV[4], 'change') end
return out
