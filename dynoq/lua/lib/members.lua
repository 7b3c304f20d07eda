--[[ lib/members: consumer-group membership, shared by group-heartbeat and group-reap.
  drop_stale(members, ttls, now) -> members dropped, members still alive (a list)
    A member whose last heartbeat (score in `members`) plus its own TTL (in `ttls`) is
    before `now` leaves both keys. Groups are small (tens of members): check each one, up
    to MAX_MEMBERS (lib/bounds.lua), the longest silent first.
  uses: lib/bounds.lua
]]
local function drop_stale(members, ttls, now)
  local all = redis.call('ZRANGE', members, 0, MAX_MEMBERS - 1, 'WITHSCORES')
  local dropped, alive = 0, {}
  for i = 1, #all, 2 do
    local ttl = tonumber(redis.call('HGET', ttls, all[i]) or '0')
    if tonumber(all[i + 1]) + ttl < now then
      redis.call('ZREM', members, all[i])
      redis.call('HDEL', ttls, all[i])
      dropped = dropped + 1
    else
      alive[#alive + 1] = all[i]
    end
  end
  return dropped, alive
end
