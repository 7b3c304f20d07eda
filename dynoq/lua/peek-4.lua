--[[ peek: the next messages of one shard in delivery order, read-only (nothing is claimed).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] msgs  KEYS[4] dlv
  ARGV[1] count
  returns: {now ms, id, record, attempts, ...}: ready messages first, then due delayed ones
  uses: lib/clock.lua lib/delivery.lua
  flags: no-writes
]]
local ready, delayed, msgs, dlv = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local count = tonumber(ARGV[1])
local now = now_ms()
local out = {now}
local ids = redis.call('ZRANGE', ready, 0, count - 1)
if #ids < count then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, count - #ids)) do
    ids[#ids + 1] = id
  end
end
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', msgs, id)
  if rec then
    out[#out + 1] = id
    out[#out + 1] = rec
    out[#out + 1] = attempts(redis.call('HGET', dlv, id))
  end
end
return out
