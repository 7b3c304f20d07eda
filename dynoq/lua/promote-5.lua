--[[ promote: move due delayed messages of one shard to ready, bounded (the sweeper's step;
  pop and push do the same first). A requeued message keeps its saved place.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] seq
  ARGV[1] limit (most messages moved by this call)
  returns: {promoted, 1 if more may be due else 0}
  uses: lib/promote.lua
]]
local delayed, ready, msgs, dlv, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = promote(delayed, ready, msgs, dlv, seq, now, limit)
local more = 0
if n == limit then more = 1 end
return {n, more}
