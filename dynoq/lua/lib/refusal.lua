--[[ lib/refusal: the one reply shape for a refusal, a bare negative integer (no normal
  reply of any script is one); dynoq.errors.raise_for maps each code to a typed error.
  FENCED  -1  the caller's lease on the shard is gone (expired, taken over, too close to
              its end): it may not pop, ack, nack or extend there any more
  LEASED  -2  another consumer leases this ordered shard (the caller holds no lease)
  STALE   -3  what the caller read to build the call changed meanwhile (read it again)
  CONFLICT -4 another consumer group consumes this queue
  GONE    -5  the queue (or topic) the caller opened is gone: the shard's epoch key does
              not hold the caller's epoch (its keys vanished, or it was created anew)
  BOUNDS  -6  the call carries more than one call of dynoq does, or a number out of its
              range (lib/bounds.lua): nothing was done
  fenced(lease, token) -> FENCED when `token` is given and no longer holds `lease`, else nil
  gone(epoch_key, epoch) -> GONE when `epoch` is given and `epoch_key` does not hold it,
              else nil ('' : a queue stored before epochs, not checked; docs/internals.md)
]]
local FENCED, LEASED, STALE, CONFLICT, GONE, BOUNDS = -1, -2, -3, -4, -5, -6

local function fenced(lease, token)
  if token ~= '' and redis.call('GET', lease) ~= token then return FENCED end
  return nil
end

local function gone(epoch_key, epoch)
  if epoch ~= '' and redis.call('GET', epoch_key) ~= epoch then return GONE end
  return nil
end
