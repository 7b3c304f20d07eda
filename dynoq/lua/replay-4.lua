--[[ replay: move dead-lettered messages back to the queue with their attempts reset.
  KEYS[1] dead  KEYS[2] delayed  KEYS[3] dlv  KEYS[4] msgs
  ARGV[1] limit (used when no ids are given)  ARGV[2] wake channel
  ARGV[3..] ids to replay (none = the oldest `limit` dead messages)
  returns: number of messages replayed
  uses: lib/clock.lua
  flags: allow-oom
]]
local dead, delayed, dlv, msgs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ids = {}
if #ARGV > 2 then
  for j = 3, #ARGV do ids[#ids + 1] = ARGV[j] end
else
  ids = redis.call('ZRANGE', dead, 0, tonumber(ARGV[1]) - 1)
end
local now = now_ms()
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', dead, id) == 1 and redis.call('HEXISTS', msgs, id) == 1 then
    redis.call('HDEL', dlv, id)
    redis.call('ZADD', delayed, now, id)
    n = n + 1
  end
end
if n > 0 then redis.call('PUBLISH', ARGV[2], '1') end
return n
