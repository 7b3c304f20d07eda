--[[ stats: counts of one shard, read-only.
  KEYS[1] ready|kwait  KEYS[2] delayed  KEYS[3] unack  KEYS[4] dead  KEYS[5] msgs
  KEYS[6] counts   KEYS[7] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] "hash" when the first key is a keyed shard's kwait in place of ready (a hash,
          one field per waiting message: lib/keyed.lua)
  returns: {ready (incl. due delayed), delayed (not yet due), unacked, dead,
            ms timestamp the oldest waiting message became ready, or -1,
            then the cumulative counts: pushed, acked, retried, expired, dead-lettered},
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/pin.lua
  flags: no-writes
]]
if not (#KEYS == 7 and #ARGV == 2) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local now = now_ms()
local due = redis.call('ZCOUNT', K.delayed, '-inf', now)
local oldest = -1
local first = head(K.delayed)
if first[2] and tonumber(first[2]) <= now then oldest = tonumber(first[2]) end
local keyed = ARGV[2] == 'hash'
for _, id in ipairs(keyed and {} or redis.call('ZRANGE', K.ready, 0, 0)) do
  local rec = redis.call('HGET', K.msgs, id)
  local enq, off = times(rec)
  if enq and (oldest < 0 or enq + off < oldest) then oldest = enq + off end
end
local waiting = keyed and redis.call('HLEN', K.kwait) or redis.call('ZCARD', K.ready)
local out = {waiting + due, redis.call('ZCARD', K.delayed) - due,
             live(K.unack), redis.call('ZCARD', K.dead), oldest}
for _, n in ipairs(redis.call('HMGET', K.counts, 'pushed', 'acked', 'retried', 'expired',
                              'dead')) do
  out[#out + 1] = tonumber(n) or 0
end
return out
