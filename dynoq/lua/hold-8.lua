--[[ hold: a debounced push into an ordered shard (lib/debounce.lua): the message waits
  `debounce` ms after this push and then goes last in its shard. A copy of its id that
  waits in the shard (not yet delivered) is replaced (it never runs); one held already is
  replaced (its payload and due time); one in flight or waiting for its retry is not:
  the held copy waits behind it (at most one copy waits: the latest).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] why
  KEYS[6] counts   KEYS[7] epoch  KEYS[8] expiry
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] wake channel (PUBLISHed when it is due before everything delayed)
  ARGV[3] id  ARGV[4] debounce ms  ARGV[5] msgpack body (lib/record.lua's, with its key)
  returns: 1, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/debounce.lua
  flags: none
]]
local wait = int(ARGV[4], 1, MAX_MS)
if not (#KEYS == 8 and #ARGV == 5 and wait) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id, now = ARGV[3], now_ms()
if redis.call('ZREM', K.ready, id) == 1 then  -- the copy that waits: replaced
  redis.call('HDEL', K.msgs, id)
  redis.call('HDEL', K.dlv, id)
  redis.call('HDEL', K.why, id)
  redis.call('ZREM', K.expiry, id)
end
if dhold(K, id, ARGV[5], now, wait) then redis.call('PUBLISH', ARGV[2], '1') end
return 1
