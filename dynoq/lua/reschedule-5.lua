--[[ reschedule: move a waiting message's due time to now + delay (Dyno setTimeout).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] delay ms  ARGV[4] wake channel
  returns: 1 moved, 0 not waiting (unknown, in flight or dead), or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua
  flags: allow-oom
]]
local delay = int(ARGV[3], 0, MAX_MS)
if not (#KEYS == 5 and #ARGV == 4 and delay) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
if redis.call('ZREM', K.ready, id) == 0 and not redis.call('ZSCORE', K.delayed, id) then
  return 0
end
local now = now_ms()
redis.call('ZADD', K.delayed, now + delay, id)
-- It takes a fresh place when due, and its record says when it is due now.
local d = redis.call('HGET', K.dlv, id)
if d then redis.call('HSET', K.dlv, id, (string.gsub(d, '^(%d*)|%d*|', '%1||'))) end
local rec = redis.call('HGET', K.msgs, id)
redis.call('HSET', K.msgs, id, retimed(rec, now + delay))
redis.call('PUBLISH', ARGV[4], '1')
return 1
