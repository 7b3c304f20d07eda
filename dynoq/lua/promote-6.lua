--[[ promote: move due delayed messages of one shard to ready, bounded (the sweeper's step;
  pop and push do the same first). A message given back keeps its saved place.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] seq  KEYS[6] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] limit (most messages moved by this call)
  returns: {promoted, 1 if more may be due else 0}, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/promote.lua
  flags: allow-oom
]]
local limit = int(ARGV[2], 1, SWEEP_LIMIT)
if not (#KEYS == 6 and #ARGV == 2 and limit) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local n = promote(K.delayed, K.ready, K.msgs, K.dlv, K.seq, now_ms(), limit)
local more = 0
if n == limit then more = 1 end
return {n, more}
