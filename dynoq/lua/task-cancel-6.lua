--[[ task-cancel: take a waiting task off its queue, so that it never runs, and keep
  "cancelled" for a while when its task keeps results (dynoq.Tasks: TaskHandle.cancel).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] why
  KEYS[6] result (the task's kept record, keys.result_key)
  ARGV[1] id  ARGV[2] ms to keep the record (0 = keep nothing)  ARGV[3] the record
  ARGV[4] wake channel (PUBLISHed: on an ordered shard a cancelled retry unblocks it)
  returns: 1 cancelled; 0 not waiting (running, dead-lettered, ended or unknown: nothing
           was changed)
  flags: allow-oom
]]
local delayed, ready, msgs, dlv, why = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
if redis.call('ZREM', ready, id) == 0 and redis.call('ZREM', delayed, id) == 0 then
  return 0
end
redis.call('HDEL', msgs, id)
redis.call('HDEL', dlv, id)
redis.call('HDEL', why, id)
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[6], ARGV[3], 'PX', ARGV[2]) end
redis.call('PUBLISH', ARGV[4], '1')
return 1
