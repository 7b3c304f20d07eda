--[[ extend: set a new visibility deadline (now + timeout) for one delivery (Dyno setUnackTimeout).
  KEYS[1] unack  KEYS[2] dlv  KEYS[3] lease
  ARGV[1] lease token of the caller ("" = none)  ARGV[2] timeout ms
  ARGV[3] id  ARGV[4] delivery token ("" = by id alone)
  returns: 1 extended, 0 not in flight (or a stale token), -1 the caller's lease is gone
]]
local unack, dlv, lease = KEYS[1], KEYS[2], KEYS[3]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return -1 end
local id, tok = ARGV[3], ARGV[4]
if not redis.call('ZSCORE', unack, id) then return 0 end
local d = redis.call('HGET', dlv, id)
if tok ~= '' and not (d and string.match(d, '^%d*|%d*|(.*)$') == tok) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', unack, now + tonumber(ARGV[2]), id)
return 1
