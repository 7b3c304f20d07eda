--[[ lib/nacked: what a nack's outcome tells (nack, knack).
  nacked(counts, channel, mode, back, buried) -> {back, buried}: wakes the shard's waiters
    on `channel` when any delivery was given back or dead-lettered, counts the retries
    (mode "retry") and the dead letters in `counts`
]]
local function nacked(counts, channel, mode, back, buried)
  -- Wake waiters even for a delayed retry: on an ordered shard the messages behind it are
  -- blocked until it is due, and a waiter must learn the new hint.
  if back + buried > 0 then redis.call('PUBLISH', channel, '1') end
  if mode == 'retry' and back > 0 then redis.call('HINCRBY', counts, 'retried', back) end
  if buried > 0 then redis.call('HINCRBY', counts, 'dead', buried) end
  return {back, buried}
end
