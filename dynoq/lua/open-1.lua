--[[ open: store a queue's (or topic's) settings on first open, with a new epoch; return
  the stored ones. The epoch names this creation of the queue: "<13-digit ms><8 hex>"
  (the server's clock, then the caller's random suffix), so a later creation has a
  later one. A queue stored before epochs existed gets one now (docs/internals.md).
  KEYS[1] meta (the queue's settings hash; field "epoch" holds its epoch)
  ARGV[1] random suffix of a new epoch (8 hex digits)
  ARGV[2..] field, value pairs to store when the queue does not exist yet
  returns: {1 if this call created the queue else 0, field, value, ...} (the stored hash)
  uses: lib/clock.lua
  flags: allow-oom
]]
local created = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
  created = 1
end
if redis.call('HEXISTS', KEYS[1], 'epoch') == 0 then
  redis.call('HSET', KEYS[1], 'epoch', string.format('%013d', now_ms()) .. ARGV[1])
end
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, created)
return out
