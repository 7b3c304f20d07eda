--[[ task-state: where a task's message is and what is kept of it, read-only
  (dynoq.Tasks: TaskHandle.status and info; the state is derived in dynoq/_core/tasks.py).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] dead  KEYS[5] msgs
  KEYS[6] dlv      KEYS[7] why    KEYS[8] result (the task's kept record, keys.result_key)
  ARGV[1] task id (its message id)
  returns: {where, score, attempts, why, kept, now}: where is "unack", "dead", "delayed",
           "ready", "msgs" (stored, in none of those) or "" (not stored); score its score
           there ("" when none); attempts from its delivery state; why its failure
           (lib/why.lua) or false; kept its kept record or false; now the server's ms
  uses: lib/bounds.lua lib/clock.lua lib/delivery.lua
  flags: no-writes
]]
if not (#KEYS == 8 and #ARGV == 1) then return BOUNDS end
local id = ARGV[1]
local where, score = '', ''
if redis.call('HEXISTS', K.msgs, id) == 1 then
  where = 'msgs'
  for _, set in ipairs({'unack', 'dead', 'delayed', 'ready'}) do
    local s = redis.call('ZSCORE', K[set], id)
    if s then
      where, score = set, s
      break
    end
  end
end
local d = redis.call('HGET', K.dlv, id)
return {where, score, where == 'unack' and in_flight(d) or attempts(d),
        redis.call('HGET', K.why, id), redis.call('GET', K.result), now_ms()}
