--[[ probe: what each shard could deliver now, read-only (one call instead of a pop per
  shard when a consumer is idle, and how a pop across shards finds the lowest priority).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] unack  (repeated: one group of three per shard;
  on Redis Cluster, where a script's keys share a slot, one shard a call)
  returns: one rank per shard: 0 nothing deliverable; 1 + p when its next message has
           priority p; 1 (as for priority 0) when due delayed messages or expired
           deliveries wait for a pop to bring them back (their priority is known once
           they are ready); then ms until something may become deliverable anywhere
           (-1: unknown)
  uses: lib/clock.lua lib/pin.lua lib/record.lua
  flags: no-writes
]]
local now = now_ms()
local out, hint = {}, -1
for g = 1, #KEYS, 3 do
  local best = 0
  local top = redis.call('ZRANGE', KEYS[g], 0, 0, 'WITHSCORES')
  if top[2] then best = rank(top[2]) end
  for j = 1, 2 do
    local first = head(KEYS[g + j])
    if first[2] then
      local ms = tonumber(first[2]) - now
      if ms <= 0 then best = 1 elseif hint < 0 or ms < hint then hint = ms end
    end
  end
  out[#out + 1] = best
end
out[#out + 1] = hint
return out
