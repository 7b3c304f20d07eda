--[[ purge-dead: delete dead-lettered messages for good, bounded.
  KEYS[1] dead  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] why  KEYS[5] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] limit
  returns: number of messages deleted (less than the limit once the set is empty), or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/bulk.lua
  flags: allow-oom
]]
local limit = int(ARGV[2], 1, SWEEP_LIMIT)
if not (#KEYS == 5 and #ARGV == 2 and limit) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local ids = redis.call('ZRANGE', K.dead, 0, limit - 1)
if #ids == 0 then return 0 end
bulk('ZREM', K.dead, ids)
bulk('HDEL', K.msgs, ids)
bulk('HDEL', K.dlv, ids)
bulk('HDEL', K.why, ids)
return #ids
