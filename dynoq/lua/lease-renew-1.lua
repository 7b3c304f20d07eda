--[[ lease-renew: extend the caller's lease on a shard if it still holds it.
  KEYS[1] lease
  ARGV[1] owner token  ARGV[2] lifetime ms
  returns: 1 renewed, 0 the lease is gone or held by another owner
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
