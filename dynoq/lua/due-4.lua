--[[ due: which shards have sweeping to do, read-only: the sweeper's one idle call per queue.
  KEYS[1] unack  KEYS[2] delayed  KEYS[3] done  KEYS[4] marks  (repeated: one group of four
  per shard of the batch; a batch may hold many shards on one Redis, but on Redis Cluster
  every key of a call must share a slot, so one shard a call there). Optionally one more
  key last (#KEYS not a multiple of four): the queue's set of consumer groups, so that the
  sweeper reaps members only where groups exist.
  ARGV[1] dedupe window ms (acked ids older than it are trimmed)
  returns: one bitmask per shard, in KEYS order: 1 = expired deliveries to requeue,
           2 = due delayed messages to promote, 4 = acked ids to trim, 8 = a recurring
           message's current tick has come (its next one may need pushing); 0 = nothing;
           then, with the optional key, the number of consumer groups
  uses: lib/bounds.lua lib/clock.lua lib/pin.lua
  flags: no-writes
]]
local window = int(ARGV[1], 0, MAX_MS)
local groups = #KEYS % 4 == 1
if not (fits(#KEYS - (groups and 1 or 0), 4, 4, CALL_SHARDS - 1) and #ARGV == 1 and window) then
  return BOUNDS
end
local now = now_ms()
local limits, bits = {now, now, now - window, now}, {1, 2, 4, 8}
local out = {}
for g = 1, #KEYS - (groups and 1 or 0), 4 do
  local mask = 0
  for j = 0, 3 do
    local first = head(KEYS[g + j])
    if first[2] and tonumber(first[2]) <= limits[j + 1] then mask = mask + bits[j + 1] end
  end
  out[#out + 1] = mask
end
if groups then out[#out + 1] = redis.call('SCARD', KEYS[#KEYS]) end
return out
