--[[ ack: finish deliveries of one shard; a stale delivery token changes nothing.
  KEYS[1] unack  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] done  KEYS[5] lease
  ARGV[1] lease token of the caller ("" = none: the shard is not leased by it)
  ARGV[2] dedupe window ms (acked ids are remembered in `done` for it; 0 = off)
  ARGV[3..] pairs: id, delivery token ("" = by id alone: whatever delivery is current)
  returns: number of messages acked, or -1 when the caller's lease is gone (fenced)
]]
local unack, msgs, dlv, done, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return -1 end
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local acked = 0
for j = 3, #ARGV, 2 do
  local id, tok = ARGV[j], ARGV[j + 1]
  if redis.call('ZSCORE', unack, id) then
    local d = redis.call('HGET', dlv, id)
    if tok == '' or (d and string.match(d, '^%d*|%d*|(.*)$') == tok) then
      redis.call('ZREM', unack, id)
      redis.call('HDEL', msgs, id)
      redis.call('HDEL', dlv, id)
      if window > 0 then redis.call('ZADD', done, now, id) end
      acked = acked + 1
    end
  end
end
if window > 0 and acked > 0 then
  -- Trim a bounded number of ids older than the window (at most what was added, plus some).
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now - window, 'LIMIT', 0, acked + 10)
  if #old > 0 then redis.call('ZREM', done, unpack(old)) end
end
return acked
