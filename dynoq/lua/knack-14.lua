--[[ knack: give deliveries of one keyed shard back, or dead-letter them. A retry keeps
  its place at the head of its key and, with a delay, keeps its key's slot until it is
  due (the key is blocked, every other key flows); dead-lettering frees the slot and the
  key moves on.
  KEYS[1] delayed  KEYS[2] unack  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] dead
  KEYS[6] kwait  KEYS[7] kturn  KEYS[8] kstate  KEYS[9] seq  KEYS[10] why
  KEYS[11] counts  KEYS[12] kfence  KEYS[13] epoch  KEYS[14] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] delay ms  ARGV[3] max retries (a delivery past it is dead-lettered instead)
  ARGV[4] "retry" (counts as an attempt), "dead" (dead-letter now) or "back" (give back
          unhandled: the attempt is not counted, never dead-lettered by this)
  ARGV[5] wake channel  ARGV[6] why they failed ("" = no reason; lib/why.lua)
  ARGV[7] key_concurrency
  ARGV[8..] pairs: id, delivery token ("" = by id alone)
  A delivery asked to stop (lib/control.lua) ends cancelled, whatever the mode, and its
  key moves on.
  returns: {given back, dead-lettered}, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua lib/why.lua
        lib/keyed.lua lib/kstore.lua lib/klinks.lua lib/nacked.lua
        lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
local delay, max_retries = int(ARGV[2], 0, MAX_MS), int(ARGV[3], 0, MAX_RETRIES)
local conc = int(ARGV[7], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 14 and #ARGV == 9 and delay and max_retries and conc) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local mode, reason = ARGV[4], ARGV[6]
local now = now_ms()
local back, buried = 0, 0
for j = 8, #ARGV, 2 do
  local id, tok = ARGV[j], ARGV[j + 1]
  local d = redis.call('HGET', K.dlv, id)
  local score = redis.call('ZSCORE', K.unack, id)
  if score and matches(d, tok, score) and asked(K.control, id) then
    local key = kparse(redis.call('HGET', K.msgs, id))
    redis.call('ZREM', K.unack, id)
    cancelled(K.msgs, K.dlv, K.why, K.counts, K.control, id)
    if key then kfree(K, key, conc) end  -- its slot is free: the key moves on
    redis.call('PUBLISH', ARGV[5], '1')
  elseif score and matches(d, tok, score) then
    redis.call('HDEL', K.control, 'p:' .. id)  -- progress is the delivery's
    local n, _, current = in_flight(d)  -- a first delivery has no state (lib/ktake.lua)
    redis.call('ZREM', K.unack, id)
    if mode == 'back' then
      redis.call('HSET', K.dlv, id, math.max(n - 1, 0) .. '||' .. current)
    elseif not d then
      redis.call('HSET', K.dlv, id, '1||')  -- the next delivery counts this one
    end
    if mode ~= 'back' and reason ~= '' then
      record_why(K.why, id, now, 'e', reason)
    end
    local key, seq = kparse(redis.call('HGET', K.msgs, id))
    if mode == 'dead' or (mode == 'retry' and n > max_retries) then
      redis.call('ZADD', K.dead, now, id)
      buried = buried + 1
      if key then kfree(K, key, conc) end  -- its slot is free: the key moves on
    elseif delay > 0 or not key then
      redis.call('ZADD', K.delayed, now + delay, id)  -- holds its key's slot until due
      back = back + 1
    else
      kback(K, key, id, seq, conc)
      back = back + 1
    end
  end
end
return nacked(K.counts, ARGV[5], mode, back, buried)
