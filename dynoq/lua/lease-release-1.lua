--[[ lease-release: drop the caller's lease on a shard if it still holds it.
  KEYS[1] lease
  ARGV[1] the caller's value of the lease ("<token>.<fence>": lease-acquire)
  returns: 1 released, 0 not held by the caller (in that tenure)
  uses: lib/bounds.lua
  flags: allow-oom
]]
if not (#KEYS == 1 and #ARGV == 1) then return BOUNDS end
if redis.call('GET', K.lease) == ARGV[1] then return redis.call('UNLINK', K.lease) end
return 0
