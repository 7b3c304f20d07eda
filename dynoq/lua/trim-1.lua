--[[ trim: forget acked ids older than the dedupe window, bounded (ack trims only a few).
  KEYS[1] done (zset id -> ack time ms)
  ARGV[1] dedupe window ms   ARGV[2] limit (most ids dropped by this call)
  returns: {trimmed, 1 if more may be old else 0}
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]),
                       'LIMIT', 0, limit)
if #old > 0 then redis.call('ZREM', KEYS[1], unpack(old)) end
local more = 0
if #old == limit then more = 1 end
return {#old, more}
