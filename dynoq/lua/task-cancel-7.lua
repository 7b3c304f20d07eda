--[[ task-cancel: take a waiting task off its queue, so that it never runs, and keep
  "cancelled" for a while when its task keeps results (dynoq.Tasks: TaskHandle.cancel).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] why
  KEYS[6] result (the task's kept record, keys.result_key)
  KEYS[7] epoch (the queue's epoch: lib/refusal.lua gone())
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] ms to keep the record (0 = keep nothing)  ARGV[4] the record
  ARGV[5] wake channel (PUBLISHed: on an ordered shard a cancelled retry unblocks it)
  returns: 1 cancelled; 0 not waiting (running, dead-lettered, ended or unknown: nothing
           was changed); GONE (nothing was changed)
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
local keep = int(ARGV[3], 0, MAX_MS)
if not (#KEYS == 7 and #ARGV == 5 and keep) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id = ARGV[2]
if redis.call('ZREM', K.ready, id) == 0 and redis.call('ZREM', K.delayed, id) == 0 then
  return 0
end
redis.call('HDEL', K.msgs, id)
redis.call('HDEL', K.dlv, id)
redis.call('HDEL', K.why, id)
if keep > 0 then redis.call('SET', K.result, ARGV[4], 'PX', ARGV[3]) end
redis.call('PUBLISH', ARGV[5], '1')
return 1
