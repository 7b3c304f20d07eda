--[[ flow-push: push one task call of a flow, once in the flow's lifetime: its id is the
  flow's and the leaf's, and a marker in the shard's slot (`once`) says it was pushed, so
  a step told again (flow-advance to a call run twice) pushes nothing, even after the
  first push was run and acked.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  KEYS[9] counts   KEYS[10] once (keys.once_key)
  KEYS[11] epoch (the queue's epoch: lib/refusal.lua gone())
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window in ms (as push-11.lua's)
  ARGV[3] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[4] id  ARGV[5] delay ms  ARGV[6] priority  ARGV[7] msgpack body
  ARGV[8] ms the marker is kept (the flow's lifetime)
  returns: 1 pushed, 0 pushed before (nothing written), or GONE (nothing was written)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua
  flags: none
]]
local window = int(ARGV[2], 0, MAX_MS)
if not (#KEYS == 11 and #ARGV == 8 and window and int(ARGV[5], 0, MAX_MS)
        and int(ARGV[6], 0, MAX_PRIORITY) and int(ARGV[8], 1, MAX_MS)) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if redis.call('SET', K.once, '1', 'NX', 'PX', ARGV[8]) == false then return 0 end
local _, _, wake = push_into(K, true, window, now_ms(), ARGV, 4)
if wake then redis.call('PUBLISH', ARGV[3], '1') end
return 1
