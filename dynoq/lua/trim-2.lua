--[[ trim: forget acked ids older than the dedupe window, bounded (ack trims only a few).
  KEYS[1] done (zset id -> ack time ms)  KEYS[2] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window ms   ARGV[3] limit (most ids dropped by this call)
  returns: {trimmed, 1 if more may be old else 0}, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/done.lua
  flags: allow-oom
]]
local window, limit = int(ARGV[2], 0, MAX_MS), int(ARGV[3], 1, SWEEP_LIMIT)
if not (#KEYS == 2 and #ARGV == 3 and window and limit) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local trimmed = forget_acked(K.done, now_ms() - window, limit)
local more = 0
if trimmed == limit then more = 1 end
return {trimmed, more}
