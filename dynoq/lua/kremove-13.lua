--[[ kremove: delete one message of a keyed shard from every state, its key moving on; or
  cancel it (as lua/remove-10.lua does: one in flight is asked to stop, and keeps its
  key's slot until its handler is done).
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] unack KEYS[7] delayed  KEYS[8] dead  KEYS[9] dlv  KEYS[10] why
  KEYS[11] counts  KEYS[12] epoch  KEYS[13] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] wake channel  ARGV[4] key_concurrency  ARGV[5] "remove" or "cancel"
  returns: remove: 1 removed, 0 unknown id; cancel: 1 cancelled (it waited), 2 asked to
           stop (it runs), 0 neither; or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/clock.lua lib/kdrop.lua lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
local conc = int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
local mode = ARGV[5]
if not (#KEYS == 13 and #ARGV == 5 and conc and (mode == 'remove' or mode == 'cancel')) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local rec = redis.call('HGET', K.msgs, ARGV[2])
if not rec then return 0 end
if mode == 'cancel' then
  if redis.call('ZSCORE', K.unack, ARGV[2]) then
    redis.call('HSET', K.control, 'x:' .. ARGV[2], now_ms())
    return 2
  end
  if redis.call('ZSCORE', K.dead, ARGV[2]) then return 0 end
  redis.call('HINCRBY', K.counts, 'cancelled', 1)
end
kdrop(K, ARGV[2], rec, conc)
forget(K.control, {ARGV[2]})
redis.call('PUBLISH', ARGV[3], '1')
return 1
