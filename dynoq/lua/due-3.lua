--[[ due: which shards have sweeping to do, read-only: the sweeper's one idle call per queue.
  KEYS: groups of three per shard: unack, delayed, done. A batch may hold many shards on
  one Redis; on Redis Cluster every key of a call must share a slot, so one shard a call.
  Optionally one more key last (#KEYS not a multiple of three): the queue's set of
  consumer groups, so that the sweeper reaps members only where groups exist.
  ARGV[1] dedupe window ms (acked ids older than it are trimmed)
  returns: one bitmask per shard, in KEYS order: 1 = expired deliveries to requeue,
           2 = due delayed messages to promote, 4 = acked ids to trim; 0 = nothing;
           then, with the optional key, the number of consumer groups
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limits, bits = {now, now, now - tonumber(ARGV[1])}, {1, 2, 4}
local out = {}
local groups = #KEYS % 3 == 1
for g = 1, #KEYS - (groups and 1 or 0), 3 do
  local mask = 0
  for j = 0, 2 do
    local head = redis.call('ZRANGE', KEYS[g + j], 0, 0, 'WITHSCORES')
    if head[2] and tonumber(head[2]) <= limits[j + 1] then mask = mask + bits[j + 1] end
  end
  out[#out + 1] = mask
end
if groups then out[#out + 1] = redis.call('SCARD', KEYS[#KEYS]) end
return out
