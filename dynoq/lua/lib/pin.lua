--[[ lib/pin: keeps a shard's in-flight keys (`unack` zset, `dlv` hash) in their
  skiplist / hashtable encodings. Redis stores a small zset or hash (up to 128 entries of up
  to 64 bytes) as a listpack and searches it entry by entry, so with a batch of 100 in
  flight every ZADD, ZMSCORE, ZREM, HSET, HMGET and HDEL of the batch walked the whole
  list (benchmarks/bench_pin.py: 7.9 µs a message, 2.2 pinned, on Valkey 8.1). One entry
  longer than 64 bytes converts a key for good, and keeps it from being deleted when the
  last delivery leaves, so it never turns back into a listpack.
  PIN  the entry: an `unack` member scored +inf and a `dlv` field; at 513 characters it
       is no message id (ids have at most 512)
  BELOW_PIN      '(+inf': the end of every range over deadlines, so the pin is never in it
  head(zset)     {member, score} of the lowest score below +inf ({} when none): the next
                 deadline or due time of a shard's sorted set, never the pin
  live(zset)     how many members score below +inf: the deliveries in flight of `unack`
  held(hash)     whether `dlv` holds a delivery state besides the pin (one HLEN; HEXISTS
                 when it holds one entry): a drained shard, or first deliveries, have none
                 to read (the pin's own value is '', or on an ordered shard the places of
                 its batch in flight: lib/batch.lua)
]]
-- Written out, not built with string.rep: a literal is a constant of the compiled script,
-- while building it ran on every call of every script that includes this file (3-4 µs).
local PIN = 'dynoq: keeps this key a skiplist/hashtable; not a message........................................................................................................................................................................................................................................................................................................................................................................................................................................................................'
local BELOW_PIN = '(+inf'

local function head(key)
  return redis.call('ZRANGEBYSCORE', key, '-inf', BELOW_PIN, 'WITHSCORES', 'LIMIT', 0, 1)
end

local function live(key)
  return redis.call('ZCOUNT', key, '-inf', BELOW_PIN)
end

local function held(key)
  local n = redis.call('HLEN', key)
  return n > 1 or (n == 1 and redis.call('HEXISTS', key, PIN) == 0)
end
