--[[ nack: give deliveries of one shard back (after a delay), or dead-letter them.
  KEYS[1] delayed  KEYS[2] unack  KEYS[3] dlv  KEYS[4] dead  KEYS[5] lease
  KEYS[6] why      KEYS[7] counts  KEYS[8] epoch  KEYS[9] msgs  KEYS[10] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] the caller's value of the lease ("" = none)   ARGV[3] delay ms
  ARGV[4] max retries (a delivery past it is dead-lettered instead)
  ARGV[5] "retry" (counts as an attempt; past max retries it is dead-lettered),
          "dead" (dead-letter now), or "back" (give back unhandled: the attempt is not
          counted, it keeps its place, and it is never dead-lettered by this)
  ARGV[6] "1" = keep its place in the shard (ordered queues retry in place), "0" = go to the back
  ARGV[7] wake channel
  ARGV[8] why the messages failed ("" = no reason given): msgpack [error type, message,
          traceback, consumer] (lib/why.lua); not recorded for mode "back"
  ARGV[9..] pairs: id, delivery token ("" = by id alone)
  A delivery asked to stop (lib/control.lua) ends cancelled, whatever the mode: neither
  given back nor dead-lettered.
  returns: {given back, dead-lettered}, or GONE or FENCED (lib/refusal.lua)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua lib/why.lua lib/batch.lua
        lib/nacked.lua lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
local delay, max_retries = int(ARGV[3], 0, MAX_MS), int(ARGV[4], 0, MAX_RETRIES)
if not (#KEYS == 10 and #ARGV == 10 and delay and max_retries) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1]) or fenced(K.lease, ARGV[2])
if refused then return refused end
local mode = ARGV[5]
local to_dead, keep = mode == 'dead', ARGV[6] == '1' or mode == 'back'
local now = now_ms()
local back, buried = 0, 0
local reason = ARGV[8]
for j = 9, #ARGV, 2 do
  local id, tok = ARGV[j], ARGV[j + 1]
  local d = redis.call('HGET', K.dlv, id)
  local score_now = redis.call('ZSCORE', K.unack, id)
  if score_now and matches(d, tok, score_now) and asked(K.control, id) then
    redis.call('ZREM', K.unack, id)
    cancelled(K.msgs, K.dlv, K.why, K.counts, K.control, id)
    redis.call('PUBLISH', ARGV[7], '1')  -- an ordered shard's next message may go
  elseif score_now and matches(d, tok, score_now) then
    redis.call('HDEL', K.control, 'p:' .. id)  -- progress is the delivery's
    local n, score, current = in_flight(d)
    -- A first delivery has no state: its place, kept only where it is used (a delivery
    -- given back in place), is its batch's on an ordered shard (lib/batch.lua).
    if not d and keep then score = place_of(K.dlv, id) end
    local state = nil  -- what its delivery state becomes (nil: as it is)
    redis.call('ZREM', K.unack, id)
    if mode == 'back' then
      state = math.max(n - 1, 0) .. '|' .. score .. '|' .. current
    elseif reason ~= '' then
      record_why(K.why, id, now, 'e', reason)
    end
    if to_dead or (mode == 'retry' and n > max_retries) then
      redis.call('ZADD', K.dead, now, id)
      -- A first delivery without a state gets one: its attempt counts (lib/delivery.lua).
      if not d then state = '1||' end
      buried = buried + 1
    else
      redis.call('ZADD', K.delayed, now + delay, id)
      if not keep then
        state = n .. '||' .. current
      elseif not state and not d then  -- a retry in place: the attempt and the place
        state = n .. '|' .. score .. '|'
      end
      back = back + 1
    end
    if state then redis.call('HSET', K.dlv, id, state) end
  end
end
return nacked(K.counts, ARGV[7], mode, back, buried)
