--[[ krequeue: the sweeper's step on a keyed shard, bounded: expired deliveries go back
  at the head of their key (the key's fence raised) or to the dead letters past max
  retries, and retries that fell due go back at the head of their key.
  KEYS[1] msgs   KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] kfence
  KEYS[6] seq    KEYS[7] unack  KEYS[8] dlv    KEYS[9] delayed KEYS[10] dead
  KEYS[11] why   KEYS[12] counts  KEYS[13] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] max retries  ARGV[3] limit  ARGV[4] wake channel  ARGV[5] key_concurrency
  returns: {given back, dead-lettered, 1 if more remain else 0}, or GONE
  uses: lib/clock.lua lib/refusal.lua lib/keyed.lua
  flags: allow-oom
]]
local refused = gone(KEYS[13], ARGV[1])
if refused then return refused end
local K = {msgs = KEYS[1], kwait = KEYS[2], kturn = KEYS[3], kstate = KEYS[4],
           kfence = KEYS[5], seq = KEYS[6], unack = KEYS[7], dlv = KEYS[8],
           delayed = KEYS[9], dead = KEYS[10], why = KEYS[11]}
local counts = KEYS[12]
local limit, conc = tonumber(ARGV[3]), tonumber(ARGV[5])
local now = now_ms()
local back, buried, looked = kexpire(K, now, limit, tonumber(ARGV[2]), conc)
local due = kpromote(K, now, limit, conc)
if back > 0 then redis.call('HINCRBY', counts, 'expired', back) end
if buried > 0 then redis.call('HINCRBY', counts, 'dead', buried) end
if back + due > 0 then redis.call('PUBLISH', ARGV[4], '1') end
local more = 0
if looked == limit or due == limit then more = 1 end
return {back, buried, more}
