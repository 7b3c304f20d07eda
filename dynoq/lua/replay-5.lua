--[[ replay: move dead-lettered messages back to the queue with their attempts reset.
  KEYS[1] dead  KEYS[2] delayed  KEYS[3] dlv  KEYS[4] msgs  KEYS[5] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] limit (used when no ids are given)  ARGV[3] wake channel
  ARGV[4..] ids to replay (none = the oldest `limit` dead messages)
  returns: number of messages replayed, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/replay.lua
  flags: allow-oom
]]
local limit = int(ARGV[2], 1, SWEEP_LIMIT)
if not (#KEYS == 5 and fits(#ARGV, 3, 1, IDS_CHUNK) and limit) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local ids = dead_ids(K.dead, ARGV, 4, limit)
local now = now_ms()
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', K.dead, id) == 1 and redis.call('HEXISTS', K.msgs, id) == 1 then
    redis.call('HDEL', K.dlv, id)
    redis.call('ZADD', K.delayed, now, id)
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', ARGV[3], '1') end
return n
