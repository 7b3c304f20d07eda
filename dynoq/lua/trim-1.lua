--[[ trim: forget acked ids older than the dedupe window, bounded (ack trims only a few).
  KEYS[1] done (zset id -> ack time ms)
  ARGV[1] dedupe window ms   ARGV[2] limit (most ids dropped by this call)
  returns: {trimmed, 1 if more may be old else 0}
  uses: lib/clock.lua lib/bulk.lua
  flags: allow-oom
]]
local limit = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms() - tonumber(ARGV[1]),
                       'LIMIT', 0, limit)
bulk('ZREM', KEYS[1], old)
local more = 0
if #old == limit then more = 1 end
return {#old, more}
