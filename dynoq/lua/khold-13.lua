--[[ khold: a debounced push into a keyed shard (ordered="key"; lib/debounce.lua): the
  message waits `debounce` ms after this push and then goes last in its key. A copy of
  its id that waits in its key (not yet delivered) is replaced (it never runs; its key
  moves on); one held already is replaced (its payload and due time); one in flight or
  waiting for its retry is not: the held copy waits behind it (at most one waits).
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] unack KEYS[7] delayed  KEYS[8] dead  KEYS[9] dlv  KEYS[10] why
  KEYS[11] counts  KEYS[12] epoch  KEYS[13] expiry
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] wake channel (PUBLISHed when a waiting copy was replaced, its key moving on,
          or it is due before everything delayed)
  ARGV[3] key_concurrency
  ARGV[4] id  ARGV[5] key  ARGV[6] debounce ms  ARGV[7] msgpack body (without the key)
  returns: 1, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/keyed.lua
        lib/kdrop.lua lib/debounce.lua
  flags: none
]]
local conc, wait = int(ARGV[3], 1, MAX_KEY_CONCURRENCY), int(ARGV[6], 1, MAX_MS)
if not (#KEYS == 13 and #ARGV == 7 and conc and wait) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id, key, now = ARGV[4], ARGV[5], now_ms()
local wake = redis.call('HEXISTS', K.kwait, id) == 1
if wake then  -- the copy that waits: replaced
  kdrop(K, id, redis.call('HGET', K.msgs, id), conc)
  redis.call('ZREM', K.expiry, id)
end
if dhold(K, id, kprepared(key) .. ARGV[7], now, wait) or wake then
  redis.call('PUBLISH', ARGV[2], '1')
end
return 1
