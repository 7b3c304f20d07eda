--[[ schedule-start: may a delivered occurrence of an overlap="skip" schedule run? Not
  while the last occurrence that ran still waits or runs (its record is stored and not
  dead-lettered): then this one is skipped. Otherwise it becomes the one that runs. A
  redelivery of the occurrence that runs runs again.
  KEYS[1] epoch  KEYS[2] control (field "run:<schedule id>": the occurrence that runs)
  KEYS[3] msgs   KEYS[4] dead
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] schedule id  ARGV[3] the delivered occurrence's id
  returns: 1 it runs; or the id of the occurrence that runs (a string): this one is
           skipped; or GONE
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
if not (#KEYS == 4 and #ARGV == 3) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local field = 'run:' .. ARGV[2]
local running = redis.call('HGET', K.control, field)
if running and running ~= ARGV[3] and redis.call('HEXISTS', K.msgs, running) == 1
    and not redis.call('ZSCORE', K.dead, running) then
  return running
end
redis.call('HSET', K.control, field, ARGV[3])
return 1
