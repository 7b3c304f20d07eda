--[[ kpop: claim up to `count` messages of one keyed shard (ordered="key"), one key's head
  at a time, keys round-robin: each key served goes behind the keys already waiting (a
  weighted key after its round of turns: lib/kweight.lua), a key served too recently for
  the key_rate_limit rests until its time (lib/krate.lua).
  First gives back what expired (at the head of its key, its fence raised; or dead past
  max retries) and the retries that fell due (at the head of their key), and places the
  debounced messages that fell due (last in their keys: lib/debounce.lua), bounded. A head
  whose record does not name its key (not written by dynoq) is dead-lettered (lib/ktake.lua).
  KEYS[1] msgs   KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] kfence
  KEYS[6] seq    KEYS[7] unack  KEYS[8] dlv    KEYS[9] delayed KEYS[10] dead
  KEYS[11] why   KEYS[12] counts  KEYS[13] epoch  KEYS[14] control  KEYS[15] expiry
  KEYS[16] krate KEYS[17] krest
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] count  ARGV[3] visibility timeout ms  ARGV[4] nonce (with the attempt number
          it makes the delivery token)  ARGV[5] max retries  ARGV[6] wake channel (PUBLISHed when
          expired deliveries were given back)  ARGV[7] key_concurrency
  ARGV[8] key_rate_limit's count (0: none)  ARGV[9] its period ms
  returns: {1, rest, score, id, record, attempts, fence, ...}  rest: 1 if a key may
           deliver more. A first delivery (attempts 1) has no delivery state and its token
           is `score`, the batch's `unack` score (lib/delivery.lua); any other's is
           "<nonce>.<attempts>"
           {0, hint, 0}  nothing claimed; hint = ms until something may be (-1 unknown:
           the first due retry, expired delivery or end of a key's rest);
           {0, -1, 0} too while the queue is paused (lua/pause-2.lua)
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/pin.lua lib/hint.lua lib/kexpire.lua
        lib/ktake.lua lib/delivery.lua lib/paused.lua lib/lapse.lua lib/klapse.lua
        lib/krate.lua lib/kdebounce.lua
  flags: allow-oom
]]
local count, vis, nonce = int(ARGV[2], 1, MAX_BATCH), int(ARGV[3], 1, MAX_MS), ARGV[4]
local max_retries, conc = int(ARGV[5], 0, MAX_RETRIES), int(ARGV[7], 1, MAX_KEY_CONCURRENCY)
local per, period = int(ARGV[8], 0, MAX_RATE), int(ARGV[9], 0, MAX_MS)
if not (#KEYS == 17 and #ARGV == 9 and count and vis and max_retries and conc and per
        and period) then
  return BOUNDS
end
local gap = rgap(per, period)
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local now = now_ms()

if kexpire(K, now, 100, max_retries, conc) > 0 then redis.call('PUBLISH', ARGV[6], '1') end
kpromote(K, now, EXPIRE_LIMIT, conc)
kdplace(K, now, 500, conc)  -- debounced messages that fell due: last in their keys
-- What was pushed with an expiry and not delivered by then: to the dead letters.
local expiring = redis.call('EXISTS', K.expiry) == 1
if expiring then klapse(K, now, LAPSE_LIMIT, conc) end
if paused(K.control) then return idle_reply(0) end
if gap then rwake(K, now, conc, EXPIRE_LIMIT) end  -- keys whose rest ended: back in line

local due = deadline(now + vis, nonce)
local out = {1, 0, due}
local _, alien = ktake(K, count, due, nonce, conc, out, now, gap)
if alien > 0 then redis.call('HINCRBY', K.counts, 'dead', alien) end
if #out == 3 then
  -- keys still in line (a take that sent its most to rest): look again at once
  if gap and redis.call('EXISTS', K.kturn) == 1 then return {0, 0, 0} end
  return {0, wait_hint(K.delayed, K.unack, now, gap and rnext(K, now) or -1), 0}
end
if expiring then taken(K.expiry, out, 4) end  -- delivered: an expiry no longer applies
-- Keep the in-flight keys skiplist/hashtable (lib/pin.lua).
redis.call('ZADD', K.unack, '+inf', PIN)
redis.call('HSET', K.dlv, PIN, '')
out[2] = redis.call('ZCARD', K.kturn) > 0 and 1 or 0
return out
