--[[ extend: set a new visibility deadline (now + timeout) for one delivery (Dyno setUnackTimeout).
  KEYS[1] unack  KEYS[2] dlv  KEYS[3] lease
  ARGV[1] lease token of the caller ("" = none)  ARGV[2] timeout ms
  ARGV[3] id  ARGV[4] delivery token ("" = by id alone)
  ARGV[5] wake channel: PUBLISHed when the timeout is 0 (visible again at once, as Dyno's
          setUnackTimeout(id, 0): the next pop of the shard gives it back, as any expired
          delivery, and a waiting consumer looks now)
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
local timeout = tonumber(ARGV[2])
redis.call('ZADD', unack, now_ms() + timeout, id)
if timeout == 0 then redis.call('PUBLISH', ARGV[5], '1') end
return 1
