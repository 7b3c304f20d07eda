--[[ remove: delete one message from every state of its shard, or cancel it.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] why      KEYS[8] epoch  KEYS[9] counts  KEYS[10] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] wake channel (PUBLISHed when an in-flight message was removed: on an
  ordered shard that makes the next message deliverable)
  ARGV[4] "remove", or "cancel": a waiting message is deleted and counted cancelled; one
  in flight is asked to stop (lib/control.lua: it ends cancelled when its delivery ends)
  and stays in flight meanwhile (an ordered shard stays blocked until its handler is done)
  returns: remove: 1 removed, 0 unknown id; cancel: 1 cancelled (it waited), 2 asked to
           stop (it runs), 0 neither (dead-lettered or unknown: nothing changed); or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/clock.lua lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
local mode = ARGV[4]
if not (#KEYS == 10 and #ARGV == 4 and (mode == 'remove' or mode == 'cancel')) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
if mode == 'cancel' then
  if redis.call('ZSCORE', K.unack, id) then
    redis.call('HSET', K.control, 'x:' .. id, now_ms())
    return 2
  end
  if redis.call('ZREM', K.ready, id) + redis.call('ZREM', K.delayed, id) == 0 then return 0 end
  cancelled(K.msgs, K.dlv, K.why, K.counts, K.control, id)
  return 1
end
redis.call('ZREM', K.delayed, id)
redis.call('ZREM', K.ready, id)
local was_in_flight = redis.call('ZREM', K.unack, id)
redis.call('ZREM', K.dead, id)
redis.call('HDEL', K.dlv, id)
redis.call('HDEL', K.why, id)
forget(K.control, {id})
if was_in_flight == 1 then redis.call('PUBLISH', ARGV[3], '1') end
return redis.call('HDEL', K.msgs, id)
