--[[ lease-acquire: take a shard's lease if nobody holds it (redis-py's Lock: SET NX PX),
  and count the takeover in the shard's fencing number, atomically.
  KEYS[1] lease  KEYS[2] fence (the shard's fencing number: it grows at every takeover)
  KEYS[3] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] owner token  ARGV[3] lifetime ms
  returns: {1, fencing number} when taken, {0, ms until the lease may be free} when held,
           or GONE (nothing was written)
  uses: lib/refusal.lua
  flags: allow-oom
]]
local refused = gone(KEYS[3], ARGV[1])
if refused then return refused end
if redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, math.max(redis.call('PTTL', KEYS[1]), 1)}
