--[[ task-push: push a task by id unless a task of that id waits, runs or has its result
  kept (dynoq.Tasks: apply(id=...) of a task with keep_result).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  KEYS[9] counts   KEYS[10] result (the task's kept record, keys.result_key)
  KEYS[11] epoch (the queue's epoch: lib/refusal.lua gone())
  KEYS[12] expiry (lib/lapse.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window in ms (as push-11.lua's)
  ARGV[3] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[4] id  ARGV[5] delay ms  ARGV[6] priority  ARGV[7] msgpack body
  returns: 1 pushed, 0 skipped (the id waits, runs, is dead-lettered or has a kept record),
           or GONE (nothing was written)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua
  flags: none
]]
local window = int(ARGV[2], 0, MAX_MS)
if not (#KEYS == 12 and #ARGV == 7 and window and int(ARGV[5], 0, MAX_MS)
        and int(ARGV[6], 0, MAX_PRIORITY)) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if redis.call('EXISTS', K.result) == 1 then return 0 end
local out, _, wake = push_into(K, true, window, now_ms(), ARGV, 4)
if wake then redis.call('PUBLISH', ARGV[3], '1') end
if out[1] == 1 then return 1 end
return 0
