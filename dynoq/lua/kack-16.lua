--[[ kack: finish deliveries of one keyed shard; each frees a slot of its key, whose next
  message may then go (at the turn it keeps when weighted: lib/kweight.lua). A stale
  delivery token changes nothing. With `take`, the ack and the next pop share a round
  trip when that is fair: when one key alone of the shard is ready after the acks (a hot
  key alone), its next messages are delivered in this reply
  (lib/ktake.lua); with several keys ready, or the queue paused, nothing is.
  KEYS[1] unack  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] done  KEYS[5] kwait
  KEYS[6] kturn  KEYS[7] kstate  KEYS[8] seq  KEYS[9] why  KEYS[10] counts
  KEYS[11] kfence  KEYS[12] epoch  KEYS[13] control  KEYS[14] expiry
  KEYS[15] krate  KEYS[16] krest
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window ms (acked ids are remembered in `done` for it; 0 = off)
  ARGV[3] wake channel (PUBLISHed when a key may deliver again where none could)
  ARGV[4] key_concurrency
  ARGV[5] take: messages to deliver with the reply (0: none), ARGV[6] their visibility
          timeout ms, ARGV[7] nonce (their delivery tokens as kpop-17.lua makes them)
  ARGV[8] key_rate_limit's count (0: none)  ARGV[9] its period ms (lib/krate.lua)
  ARGV[10] a delivery token T, ARGV[11] a count n, then n ids delivered under T, then pairs:
          id, delivery token ("" = by id alone: whatever delivery is current) (lib/acks.lua)
  returns: number of messages acked (take 0), or {acked, score, id, record, attempts,
           fence, ...} (take > 0; score as kpop-17.lua returns it); or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/pin.lua lib/delivery.lua lib/bulk.lua
        lib/done.lua lib/keyed.lua lib/kstore.lua lib/ktake.lua lib/acks.lua lib/paused.lua
        lib/control.lua lib/lapse.lua lib/kweight.lua lib/krate.lua
  flags: allow-oom
]]
local window, conc = int(ARGV[2], 0, MAX_MS), int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
local take = int(ARGV[5], 0, MAX_BATCH)
local named, tokens = acks(10, MAX_BATCH)
local per, period = int(ARGV[8], 0, MAX_RATE), int(ARGV[9], 0, MAX_MS)
if not (#KEYS == 16 and named and window and conc and take and int(ARGV[6], 0, MAX_MS)
        and per and period) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local reasons = redis.call('EXISTS', K.why) == 1  -- a failure reason to forget, maybe
local ids, toks, seen = {}, {}, {}
for k, id in ipairs(named) do
  if not seen[id] then  -- an id given twice is acked once
    seen[id] = true
    ids[#ids + 1] = id
    toks[#toks + 1] = tokens[k]
  end
end
local out = {0, ''}
local good = {}
-- No states but the pin (first deliveries): none to read or delete.
local states = held(K.dlv)
if #ids > 0 then
  local deadlines = bulk_read('ZMSCORE', K.unack, ids)
  local dlvs = states and bulk_read('HMGET', K.dlv, ids) or {}
  for k, id in ipairs(ids) do
    if deadlines[k] and matches(dlvs[k], toks[k], deadlines[k]) then good[#good + 1] = id end
  end
end
if #good == 0 then return take > 0 and out or 0 end
local recs = bulk_read('HMGET', K.msgs, good)
local acked = bulk('ZREM', K.unack, good)
bulk('HDEL', K.msgs, good)
if states then bulk('HDEL', K.dlv, good) end
if reasons then bulk('HDEL', K.why, good) end
forget(K.control, good)
-- each acked message frees a slot of its key
local order, freed = {}, {}
for k in ipairs(good) do
  local key = kkey(recs[k])
  if key then
    if not freed[key] then
      freed[key] = 0
      order[#order + 1] = key
    end
    freed[key] = freed[key] + 1
  end
end
-- Waiters need the news only when no key was ready (they look again after each wake-up
-- until they find none): not at every ack.
local idle = redis.call('EXISTS', K.kturn) == 0
-- A weighted key whose round is not over goes back to its turn (lib/kweight.lua).
local ws = wany(K) and wload(K, order) or nil
local woke = kfreed(K, order, freed, conc, wkeep(ws, order)) > 0 and idle
redis.call('HINCRBY', K.counts, 'acked', acked)
if window > 0 then remember_acked(K.done, good, window, acked) end
if take > 0 and redis.call('ZCARD', K.kturn) == 1 and not paused(K.control) then
  -- one key alone may deliver
  local now = now_ms()
  out[2] = deadline(now + tonumber(ARGV[6]), ARGV[7])
  if ktake(K, take, out[2], ARGV[7], conc, out, now, rgap(per, period)) > 0 then
    woke = woke and redis.call('EXISTS', K.kturn) == 1  -- nobody else needs waking for it
    if redis.call('EXISTS', K.expiry) == 1 then  -- delivered: no longer expires
      taken(K.expiry, out, 3)
    end
    redis.call('ZADD', K.unack, '+inf', PIN)
    redis.call('HSET', K.dlv, PIN, '')
  end
end
if woke then redis.call('PUBLISH', ARGV[3], '1') end
if take > 0 then
  out[1] = acked
  return out
end
return acked
