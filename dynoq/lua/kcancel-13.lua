--[[ kcancel: cancel a message of a keyed shard (as lua/cancel-9.lua does): one that waits
  is deleted and counted cancelled, its key moving on; one in flight is asked to stop and
  keeps its key's slot until its handler is done (it ends cancelled at its nack or when
  it expires, lib/control.lua).
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] unack KEYS[7] delayed  KEYS[8] dead  KEYS[9] dlv  KEYS[10] why
  KEYS[11] counts  KEYS[12] epoch  KEYS[13] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] wake channel  ARGV[4] key_concurrency
  A debounced copy held for it (lib/debounce.lua) waits: it is taken off (cancelled).
  returns: 1 cancelled (it waited), 2 asked to stop (it runs), 0 neither (dead-lettered,
           prepared or unknown: nothing changed); or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/clock.lua lib/kdrop.lua lib/bulk.lua lib/control.lua
        lib/debounce.lua
  flags: allow-oom
]]
local conc = int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 13 and #ARGV == 4 and conc) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
local held = dcancel(K, id)
local rec = redis.call('HGET', K.msgs, id)
if not rec then return held end
if redis.call('ZSCORE', K.unack, id) then
  ask(K.control, id)
  return 2
end
-- Only what waits (in its key's chain, or a retry due later): a dead letter or a
-- prepared message stays as it is.
if not (redis.call('HEXISTS', K.kwait, id) == 1 or redis.call('ZSCORE', K.delayed, id)) then
  return held
end
redis.call('HINCRBY', K.counts, 'cancelled', 1)
kdrop(K, id, rec, conc)
forget(K.control, {id})
redis.call('PUBLISH', ARGV[3], '1')
return 1
