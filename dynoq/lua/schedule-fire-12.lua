--[[ schedule-fire: push a recurring message's occurrence for one tick, unless that tick
  (or a later one) was already pushed: exactly one occurrence per tick, however many
  consumers and sweepers fire it.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq  KEYS[8] done  KEYS[9] counts
  KEYS[10] sched (hash schedule id -> its definition: it must still be scheduled)
  KEYS[11] marks (zset schedule id -> the latest tick pushed, ms)
  KEYS[12] epoch (the queue's epoch: lib/refusal.lua gone())
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] schedule id  ARGV[3] tick ms (server clock)  ARGV[4] the occurrence's id
  ARGV[5] priority  ARGV[6] msgpack body  ARGV[7] wake channel  ARGV[8] dedupe window ms
  returns: 1 pushed, 0 not (unscheduled, or this tick was pushed already), or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua
  flags: allow-oom
]]
local tick, window = int(ARGV[3], 0, EXACT), int(ARGV[8], 0, MAX_MS)
if not (#KEYS == 12 and #ARGV == 8 and tick and window and int(ARGV[5], 0, MAX_PRIORITY)) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
if redis.call('HEXISTS', K.sched, id) == 0 then return 0 end
local mark = redis.call('ZSCORE', K.marks, id)
if mark and tonumber(mark) >= tick then return 0 end
redis.call('ZADD', K.marks, tick, id)
local now = now_ms()
local _, pushed, wake = push_into(K, true, window, now,
                            {ARGV[4], math.max(tick - now, 0), ARGV[5], ARGV[6]}, 1)
if wake then redis.call('PUBLISH', ARGV[7], '1') end
return pushed
