--[[ requeue: give back deliveries whose visibility ran out (Dyno processUnacks), bounded.
  With force, give back every delivery of the shard: a new lease holder takes over the
  old holder's in-flight messages, which return at the head in their saved order.
  KEYS[1] unack  KEYS[2] delayed  KEYS[3] dlv  KEYS[4] dead  KEYS[5] lease
  KEYS[6] why    KEYS[7] counts  KEYS[8] epoch  KEYS[9] msgs  KEYS[10] control
  KEYS[11] expiry (messages pushed with an expiry: what was not delivered by then is
  dead-lettered, lib/lapse.lua, at most `limit` a call)  KEYS[12] ready
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] the caller's value of the lease ("" = none)  ARGV[3] "1" = force (all deliveries)
  ARGV[4] max retries (a delivery past it is dead-lettered)  ARGV[5] limit
  ARGV[6] wake channel
  returns: {given back, dead-lettered (expired ones included), 1 if more remain else 0},
           or GONE or FENCED
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/bulk.lua lib/control.lua lib/expire.lua lib/lapse.lua
        lib/pin.lua
  flags: allow-oom
]]
local max_retries, limit = int(ARGV[4], 0, MAX_RETRIES), int(ARGV[5], 1, SWEEP_LIMIT)
if not (#KEYS == 12 and #ARGV == 6 and max_retries and limit) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1]) or fenced(K.lease, ARGV[2])
if refused then return refused end
local now = now_ms()
local upto = now
if ARGV[3] == '1' then upto = BELOW_PIN end  -- every delivery
local back, buried, looked = give_back(K, now, upto, limit, max_retries)
if back > 0 then redis.call('PUBLISH', ARGV[6], '1') end
local lapsed, lapsing = 0, false
if redis.call('EXISTS', K.expiry) == 1 then lapsed, lapsing = lapse(K, now, limit) end
local more = 0
if looked == limit or lapsing then more = 1 end
return {back, buried + lapsed, more}
