--[[ probe: which shards have something deliverable now, read-only (one call instead of a
  pop per shard when a consumer is idle).
  KEYS[1] ready  KEYS[2] delayed  KEYS[3] unack  KEYS[4] epoch  (repeated: one group of
  four per shard; on Redis Cluster, where a script's keys share a slot, one shard a call)
  ARGV[1] the caller's epoch of the queue ("" = not checked): an idle consumer learns
          here that its queue is gone
  returns: one flag per shard (1: ready messages, due delayed ones or expired deliveries),
           then ms until something may become deliverable anywhere (-1: unknown); or GONE
  uses: lib/clock.lua lib/refusal.lua lib/pin.lua
  flags: no-writes
]]
for g = 4, #KEYS, 4 do
  local refused = gone(KEYS[g], ARGV[1])
  if refused then return refused end
end
local now = now_ms()
local out, hint = {}, -1
for g = 1, #KEYS, 4 do
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
