--[[ probe: what each shard could deliver now, read-only (one call instead of a pop per
  shard when a consumer is idle, and how a pop across shards finds the lowest priority).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] unack  KEYS[4] epoch  KEYS[5] control
  KEYS[6] krest (a keyed queue's keys resting for its key_rate_limit, lib/krate.lua:
          one whose rest ended is deliverable, a pop puts it back in line; none elsewhere)
  KEYS[1..] repeated: one group of six per shard; on Redis Cluster, where a script's keys
  share a slot, one shard a call
  ARGV[1] the caller's epoch of the queue ("" = not checked): an idle consumer learns
          here that its queue is gone
  returns: one rank per shard (lib/rank.lua: 0 nothing deliverable, 1 + the lowest
           priority it may deliver), then ms until something may become deliverable
           anywhere (-1: unknown); or GONE. A paused shard (lua/pause-2.lua) reads as an
           empty one: rank 0, no time
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/rank.lua lib/paused.lua
  flags: no-writes
]]
if not (fits(#KEYS, 6, 6, CALL_SHARDS - 1) and #ARGV == 1) then return BOUNDS end
local shards = {}
for g = 1, GROUPS do
  shards[g] = group_keys(g)
  local refused = gone(shards[g].epoch, ARGV[1])
  if refused then return refused end
end
local now = now_ms()
local out, hint = {}, -1
for _, k in ipairs(shards) do
  local best, ms = 0, -1
  if not paused(k.control) then best, ms = rank_of(k.ready, k.delayed, k.unack, now, k.krest) end
  if ms >= 0 and (hint < 0 or ms < hint) then hint = ms end
  out[#out + 1] = best
end
out[#out + 1] = hint
return out
