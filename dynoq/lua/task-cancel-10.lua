--[[ task-cancel: take a waiting task off its queue, so that it never runs, or ask a running
  one to stop (lib/control.lua: it ends cancelled when its delivery ends), and keep
  "cancelled" for a while when its task keeps results (dynoq.Tasks: TaskHandle.cancel).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] why
  KEYS[6] result (the task's kept record, keys.result_key)
  KEYS[7] epoch (the queue's epoch: lib/refusal.lua gone())
  KEYS[8] unack  KEYS[9] control  KEYS[10] counts
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] ms to keep the record (0 = keep nothing)  ARGV[4] the record
  ARGV[5] wake channel (PUBLISHed: on an ordered shard a cancelled retry unblocks it)
  returns: 1 cancelled; 2 asked to stop (it runs); 0 neither (dead-lettered, ended or
           unknown: nothing was changed); GONE (nothing was changed)
  uses: lib/bounds.lua lib/refusal.lua lib/clock.lua lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
local keep = int(ARGV[3], 0, MAX_MS)
if not (#KEYS == 10 and #ARGV == 5 and keep) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local done = cancel_plain(K, ARGV[2])
if done == 0 then return 0 end
-- Kept now also for a running one: what its handler's end writes (a result kept with its
-- ack, when it ended well before it heard) replaces it.
if keep > 0 then redis.call('SET', K.result, ARGV[4], 'PX', ARGV[3]) end
if done == 1 then redis.call('PUBLISH', ARGV[5], '1') end
return done
