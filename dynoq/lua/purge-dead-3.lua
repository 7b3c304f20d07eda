--[[ purge-dead: delete dead-lettered messages for good, bounded.
  KEYS[1] dead  KEYS[2] msgs  KEYS[3] dlv
  ARGV[1] limit
  returns: number of messages deleted (less than the limit once the set is empty)
]]
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
return #ids
