--[[ lease-acquire: take a shard's lease if nobody holds it (redis-py's Lock: SET NX PX),
  and count the takeover in the shard's fencing number, atomically.
  KEYS[1] lease  KEYS[2] fence (the shard's fencing number: it grows at every takeover)
  ARGV[1] owner token  ARGV[2] lifetime ms
  returns: {1, fencing number} when taken, {0, ms until the lease may be free} when held
  flags: allow-oom
]]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, math.max(redis.call('PTTL', KEYS[1]), 1)}
