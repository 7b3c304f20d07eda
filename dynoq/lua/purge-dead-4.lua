--[[ purge-dead: delete dead-lettered messages for good, bounded.
  KEYS[1] dead  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] why
  ARGV[1] limit
  returns: number of messages deleted (less than the limit once the set is empty)
  uses: lib/bulk.lua
  flags: allow-oom
]]
local dead, msgs, dlv = KEYS[1], KEYS[2], KEYS[3]
local ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return 0 end
bulk('ZREM', dead, ids)
bulk('HDEL', msgs, ids)
bulk('HDEL', dlv, ids)
bulk('HDEL', KEYS[4], ids)
return #ids
