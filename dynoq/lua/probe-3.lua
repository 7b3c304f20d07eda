--[[ probe: what each shard could deliver now, read-only (one call instead of a pop per
  shard when a consumer is idle, and how a pop across shards finds the lowest priority).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] unack  (repeated: one group of three per shard;
  on Redis Cluster, where a script's keys share a slot, one shard a call)
  returns: one rank per shard (lib/rank.lua: 0 nothing deliverable, 1 + the lowest
           priority it may deliver), then ms until something may become deliverable
           anywhere (-1: unknown)
  uses: lib/clock.lua lib/rank.lua
  flags: no-writes
]]
local now = now_ms()
local out, hint = {}, -1
for g = 1, #KEYS, 3 do
  local best, ms = rank_of(KEYS[g], KEYS[g + 1], KEYS[g + 2], now)
  if ms >= 0 and (hint < 0 or ms < hint) then hint = ms end
  out[#out + 1] = best
end
out[#out + 1] = hint
return out
