--[[ requeue: give back deliveries whose visibility ran out (Dyno processUnacks), bounded.
  With force, give back every delivery of the shard: a new lease holder takes over the
  old holder's in-flight messages, which return at the head in their saved order.
  KEYS[1] unack  KEYS[2] delayed  KEYS[3] dlv  KEYS[4] dead  KEYS[5] lease
  ARGV[1] lease token of the caller ("" = none)  ARGV[2] "1" = force (all deliveries)
  ARGV[3] max retries (a delivery past it is dead-lettered)  ARGV[4] limit
  ARGV[5] wake channel
  returns: {given back, dead-lettered, 1 if more remain else 0}, or -1 when fenced
]]
local unack, delayed, dlv, dead, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return -1 end
local max_retries, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local upto = now
if ARGV[2] == '1' then upto = '+inf' end
local items = redis.call('ZRANGEBYSCORE', unack, '-inf', upto, 'LIMIT', 0, limit)
local back, buried = 0, 0
for _, id in ipairs(items) do
  local d = redis.call('HGET', dlv, id)
  redis.call('ZREM', unack, id)
  if d and tonumber(string.match(d, '^(%d+)')) > max_retries then
    redis.call('ZADD', dead, now, id)
    buried = buried + 1
  else
    redis.call('ZADD', delayed, now, id) -- due at once; promotion restores its saved place
    back = back + 1
  end
end
if back > 0 then redis.call('PUBLISH', ARGV[5], '1') end
local more = 0
if #items == limit then more = 1 end
return {back, buried, more}
