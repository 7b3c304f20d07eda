--[[ extend: set a new visibility deadline (now + timeout) for one delivery (Dyno setUnackTimeout).
  KEYS[1] unack  KEYS[2] dlv  KEYS[3] lease
  ARGV[1] lease token of the caller ("" = none)  ARGV[2] timeout ms
  ARGV[3] id  ARGV[4] delivery token ("" = by id alone)
  returns: 1 extended, 0 not in flight (or a stale token), or FENCED (lib/refusal.lua)
  uses: lib/clock.lua lib/refusal.lua lib/delivery.lua
  flags: allow-oom
]]
local unack, dlv, lease = KEYS[1], KEYS[2], KEYS[3]
local refused = fenced(lease, ARGV[1])
if refused then return refused end
local id = ARGV[3]
if not redis.call('ZSCORE', unack, id) then return 0 end
if not matches(redis.call('HGET', dlv, id), ARGV[4]) then return 0 end
redis.call('ZADD', unack, now_ms() + tonumber(ARGV[2]), id)
return 1
