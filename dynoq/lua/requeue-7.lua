--[[ requeue: give back deliveries whose visibility ran out (Dyno processUnacks), bounded.
  With force, give back every delivery of the shard: a new lease holder takes over the
  old holder's in-flight messages, which return at the head in their saved order.
  KEYS[1] unack  KEYS[2] delayed  KEYS[3] dlv  KEYS[4] dead  KEYS[5] lease
  KEYS[6] why    KEYS[7] counts
  ARGV[1] lease token of the caller ("" = none)  ARGV[2] "1" = force (all deliveries)
  ARGV[3] max retries (a delivery past it is dead-lettered)  ARGV[4] limit
  ARGV[5] wake channel
  returns: {given back, dead-lettered, 1 if more remain else 0}, or FENCED
  uses: lib/clock.lua lib/refusal.lua lib/expire.lua lib/pin.lua
  flags: allow-oom
]]
local unack, delayed, dlv, dead, lease, why, counts =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local refused = fenced(lease, ARGV[1])
if refused then return refused end
local limit = tonumber(ARGV[4])
local now = now_ms()
local upto = now
if ARGV[2] == '1' then upto = BELOW_PIN end  -- every delivery
local back, buried, looked = give_back(unack, delayed, dlv, dead, why, counts, now, upto,
                                       limit, tonumber(ARGV[3]))
if back > 0 then redis.call('PUBLISH', ARGV[5], '1') end
local more = 0
if looked == limit then more = 1 end
return {back, buried, more}
