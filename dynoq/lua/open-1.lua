--[[ open: store a queue's settings on first open; return the stored ones.
  KEYS[1] meta (the queue's settings hash)
  ARGV[1..] field, value pairs to store when the queue does not exist yet
  returns: the stored settings as a flat field, value array
  flags: allow-oom
]]
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('HSET', KEYS[1], unpack(ARGV)) end
return redis.call('HGETALL', KEYS[1])
