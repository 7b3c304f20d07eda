--[[ lease-acquire: take a shard's lease if nobody holds it (redis-py's Lock: SET NX PX),
  and count the takeover in the shard's fencing number, atomically. The lease's value
  is the owner token and that number ("<token>.<fence>"): each tenure has its own, so a
  batch, an ack or a renewal of an earlier tenure of the same owner is refused too.
  The owner's own lease in the shard's latest tenure counts as free: its take was
  answered but the reply lost, or it stopped using the lease (too close to its end to
  start a handler); it begins a new tenure rather than wait for that one to expire.
  KEYS[1] lease  KEYS[2] fence (the shard's fencing number: it grows at every takeover)
  KEYS[3] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] owner token  ARGV[3] lifetime ms
  returns: {1, fencing number} when taken, {0, ms until the lease may be free} when held,
           or GONE (nothing was written)
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
if not (#KEYS == 3 and #ARGV == 3 and int(ARGV[3], 1, MAX_MS)) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local held = redis.call('GET', K.lease)
if held and held ~= ARGV[2] .. '.' .. (redis.call('GET', K.fence) or '') then
  return {0, math.max(redis.call('PTTL', K.lease), 1)}
end
local fence = redis.call('INCR', K.fence)
redis.call('SET', K.lease, ARGV[2] .. '.' .. fence, 'PX', ARGV[3])
return {1, fence}
