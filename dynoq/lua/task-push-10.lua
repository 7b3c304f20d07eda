--[[ task-push: push a task by id unless a task of that id waits, runs or has its result
  kept (dynoq.Tasks: apply(id=...) of a task with keep_result).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  KEYS[9] counts   KEYS[10] result (the task's kept record, keys.result_key)
  ARGV[1] dedupe window in ms (as push-9.lua's)
  ARGV[2] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[3] id  ARGV[4] delay ms  ARGV[5] priority  ARGV[6] msgpack body
  returns: 1 pushed, 0 skipped (the id waits, runs, is dead-lettered or has a kept record)
  uses: lib/clock.lua lib/push.lua
  flags: none
]]
if redis.call('EXISTS', KEYS[10]) == 1 then return 0 end
local out, _, wake = push_into(KEYS, true, tonumber(ARGV[1]), now_ms(), ARGV, 3)
if wake then redis.call('PUBLISH', ARGV[2], '1') end
if out[1] == 1 then return 1 end
return 0
