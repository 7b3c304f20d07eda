--[[ nack: give deliveries of one shard back (after a delay), or dead-letter them.
  KEYS[1] delayed  KEYS[2] unack  KEYS[3] dlv  KEYS[4] dead  KEYS[5] lease
  ARGV[1] lease token of the caller ("" = none)   ARGV[2] delay ms
  ARGV[3] max retries (a delivery past it is dead-lettered instead)
  ARGV[4] "retry" or "dead" (dead-letter now)
  ARGV[5] "1" = keep its place in the shard (ordered queues retry in place), "0" = go to the back
  ARGV[6] wake channel
  ARGV[7..] pairs: id, delivery token ("" = by id alone)
  returns: {given back, dead-lettered}, or -1 when the caller's lease is gone (fenced)
]]
local delayed, unack, dlv, dead, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return -1 end
local delay, max_retries = tonumber(ARGV[2]), tonumber(ARGV[3])
local to_dead, keep = ARGV[4] == 'dead', ARGV[5] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local back, buried = 0, 0
for j = 7, #ARGV, 2 do
  local id, tok = ARGV[j], ARGV[j + 1]
  local d = redis.call('HGET', dlv, id)
  if d and redis.call('ZSCORE', unack, id) then
    local attempts, score, current = string.match(d, '^(%d*)|(%d*)|(.*)$')
    if tok == '' or current == tok then
      redis.call('ZREM', unack, id)
      if to_dead or tonumber(attempts) > max_retries then
        redis.call('ZADD', dead, now, id)
        buried = buried + 1
      else
        redis.call('ZADD', delayed, now + delay, id)
        if not keep then redis.call('HSET', dlv, id, attempts .. '||' .. current) end
        back = back + 1
      end
    end
  end
end
if back > 0 then redis.call('PUBLISH', ARGV[6], '1') end
return {back, buried}
