--[[ krequeue: the sweeper's step on a keyed shard, bounded: expired deliveries go back
  at the head of their key (the key's fence raised) or to the dead letters past max
  retries, and retries that fell due go back at the head of their key.
  KEYS[1] msgs   KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] kfence
  KEYS[6] seq    KEYS[7] unack  KEYS[8] dlv    KEYS[9] delayed KEYS[10] dead
  KEYS[11] why   KEYS[12] counts  KEYS[13] epoch  KEYS[14] control
  KEYS[15] expiry (messages pushed with an expiry: lib/lapse.lua, as requeue-11.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] max retries  ARGV[3] limit  ARGV[4] wake channel  ARGV[5] key_concurrency
  returns: {given back, dead-lettered (expired ones included), 1 if more remain else 0},
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/kexpire.lua lib/lapse.lua lib/klapse.lua
  flags: allow-oom
]]
local max_retries, limit = int(ARGV[2], 0, MAX_RETRIES), int(ARGV[3], 1, EXPIRE_LIMIT)
local conc = int(ARGV[5], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 15 and #ARGV == 5 and max_retries and limit and conc) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local now = now_ms()
local back, buried, looked = kexpire(K, now, limit, max_retries, conc)
local due = kpromote(K, now, limit, conc)
if back + due > 0 then redis.call('PUBLISH', ARGV[4], '1') end
local lapsed, lapsing = 0, false
if redis.call('EXISTS', K.expiry) == 1 then lapsed, lapsing = klapse(K, now, limit, conc) end
local more = 0
if looked == limit or due == limit or lapsing then more = 1 end
return {back, buried + lapsed, more}
