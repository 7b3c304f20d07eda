--[[ remove: delete one message from every state of its shard.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] why      KEYS[8] epoch  KEYS[9] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] wake channel (PUBLISHed when an in-flight message was removed: on an
  ordered shard that makes the next message deliverable)
  returns: 1 removed (a debounced copy held for it too: lib/debounce.lua), 0 unknown id,
  or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/bulk.lua lib/control.lua lib/debounce.lua
  flags: allow-oom
]]
if not (#KEYS == 9 and #ARGV == 3) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
local held = ddrop(K, id)
redis.call('ZREM', K.delayed, id)
redis.call('ZREM', K.ready, id)
local was_in_flight = redis.call('ZREM', K.unack, id)
redis.call('ZREM', K.dead, id)
redis.call('HDEL', K.dlv, id)
redis.call('HDEL', K.why, id)
forget(K.control, {id})  -- a cancel asked of it, its progress
if was_in_flight == 1 then redis.call('PUBLISH', ARGV[3], '1') end
return math.max(redis.call('HDEL', K.msgs, id), held)
