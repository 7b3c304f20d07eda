--[[ peek: the next messages of one shard in delivery order, read-only (nothing is claimed).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] count
  returns: {now ms, id, record, attempts, ...}: ready messages first, then due delayed
           ones; or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua
  flags: no-writes
]]
local count = int(ARGV[2], 1, MAX_BATCH)
if not (#KEYS == 5 and #ARGV == 2 and count) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local now = now_ms()
local out = {now}
local ids = redis.call('ZRANGE', K.ready, 0, count - 1)
if #ids < count then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K.delayed, '-inf', now,
                                 'LIMIT', 0, count - #ids)) do
    ids[#ids + 1] = id
  end
end
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', K.msgs, id)
  if rec then
    out[#out + 1] = id
    out[#out + 1] = rec
    out[#out + 1] = attempts(redis.call('HGET', K.dlv, id))
  end
end
return out
