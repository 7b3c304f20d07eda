--[[ extend: set a new visibility deadline (now + timeout) for one delivery (Dyno setUnackTimeout).
  KEYS[1] unack  KEYS[2] dlv  KEYS[3] lease  KEYS[4] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] the caller's value of the lease ("" = none)  ARGV[3] timeout ms
  ARGV[4] id  ARGV[5] delivery token ("" = by id alone)
  ARGV[6] wake channel: PUBLISHed when the timeout is 0 (visible again at once, as Dyno's
          setUnackTimeout(id, 0): the next pop of the shard gives it back, as any expired
          delivery, and a waiting consumer looks now)
  returns: 1 extended, 0 not in flight (or a stale token), or GONE or FENCED
           (lib/refusal.lua)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua lib/batch.lua
  flags: allow-oom
]]
local timeout = int(ARGV[3], 0, MAX_MS)
if not (#KEYS == 4 and #ARGV == 6 and timeout) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1]) or fenced(K.lease, ARGV[2])
if refused then return refused end
local id = ARGV[4]
local score = redis.call('ZSCORE', K.unack, id)
if not score then return 0 end
local d = redis.call('HGET', K.dlv, id)
if not matches(d, ARGV[5], score) then return 0 end
-- A stateless first delivery's token is its unack score, which moves now: it goes into a
-- state, the token its holder has (lib/delivery.lua), with its place on an ordered shard.
if not d then
  redis.call('HSET', K.dlv, id, '1|' .. place_of(K.dlv, id) .. '|' .. token_of(score))
end
redis.call('ZADD', K.unack, now_ms() + timeout, id)
if timeout == 0 then redis.call('PUBLISH', ARGV[6], '1') end
return 1
