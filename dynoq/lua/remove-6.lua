--[[ remove: delete one message from every state of its shard.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  ARGV[1] id
  returns: 1 removed, 0 unknown id
]]
local id = ARGV[1]
for i = 1, 3 do redis.call('ZREM', KEYS[i], id) end
redis.call('ZREM', KEYS[6], id)
redis.call('HDEL', KEYS[5], id)
return redis.call('HDEL', KEYS[4], id)
