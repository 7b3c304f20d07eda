--[[ rate-take: take up to `want` permits of a consumer group's rate limit, across every
  member: at most `count` permits in any `period` (a sliding window, exact: a log of the
  grants of the last period, at most `count` entries).
  KEYS[1] rate (zset "<seq>:<permits>" -> grant time ms)
  KEYS[2] rate_state (hash: total = permits in the log, seq = grant counter)
  ARGV[1] count  ARGV[2] period ms  ARGV[3] want
  returns: {permits granted (0..want), ms until more may be free (0 when want was met)}
  uses: lib/bounds.lua lib/clock.lua lib/bulk.lua
  flags: allow-oom
]]
-- period: the window a consumer counts grants over, a little longer than the limit's own
local count, period = int(ARGV[1], 1, MAX_RATE), int(ARGV[2], 1, EXACT)
local want = int(ARGV[3], 0, MAX_RATE)
if not (#KEYS == 2 and #ARGV == 3 and count and period and want) then return BOUNDS end
local now = now_ms()
-- At most SWEEP_LIMIT grants leave a call (a long quiet period may have aged many): those
-- left count a while longer, so fewer permits are granted, never more.
local old = redis.call('ZRANGEBYSCORE', K.rate, '-inf', now - period, 'LIMIT', 0, SWEEP_LIMIT)
if #old > 0 then
  local freed = 0
  for _, m in ipairs(old) do freed = freed + (tonumber(string.match(m, ':(%d+)$')) or 0) end
  redis.call('HINCRBY', K.rate_state, 'total', -freed)
  bulk('ZREM', K.rate, old)
end
local total = tonumber(redis.call('HGET', K.rate_state, 'total') or '0')
local granted = math.max(math.min(want, count - total), 0)
if granted > 0 then
  local seq = redis.call('HINCRBY', K.rate_state, 'seq', 1)
  redis.call('ZADD', K.rate, now, seq .. ':' .. granted)
  redis.call('HINCRBY', K.rate_state, 'total', granted)
  redis.call('PEXPIRE', K.rate, period * 2)
  redis.call('PEXPIRE', K.rate_state, period * 2)
end
local wait = 0
if granted < want then
  local oldest = redis.call('ZRANGE', K.rate, 0, 0, 'WITHSCORES')
  wait = oldest[2] and math.max(tonumber(oldest[2]) + period - now, 1) or 1
end
return {granted, wait}
