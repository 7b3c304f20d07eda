--[[ probe: which shards have something deliverable now, read-only (one call instead of a
  pop per shard when a consumer is idle).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] unack  (repeated: one group of three per shard;
  on Redis Cluster, where a script's keys share a slot, one shard a call)
  returns: one flag per shard (1: ready messages, due delayed ones or expired deliveries),
           then ms until something may become deliverable anywhere (-1: unknown)
  uses: lib/clock.lua lib/pin.lua
  flags: no-writes
]]
local now = now_ms()
local out, hint = {}, -1
for g = 1, #KEYS, 3 do
  local flag = 0
  if redis.call('ZCARD', KEYS[g]) > 0 then flag = 1 end
  for j = 1, 2 do
    local first = head(KEYS[g + j])
    if first[2] then
      local ms = tonumber(first[2]) - now
      if ms <= 0 then flag = 1 elseif hint < 0 or ms < hint then hint = ms end
    end
  end
  out[#out + 1] = flag
end
out[#out + 1] = hint
return out
