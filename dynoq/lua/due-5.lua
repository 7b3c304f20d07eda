--[[ due: which shards have sweeping to do, read-only: the sweeper's one idle call per queue.
  KEYS[1] unack  KEYS[2] delayed  KEYS[3] done  KEYS[4] marks  KEYS[5] expiry
  KEYS[1..] repeated: one group of five per shard of the batch; a batch may hold many
  shards on one Redis, but on Redis Cluster every key of a call must share a slot, so one
  shard a call there
  KEYS[#KEYS] registry (optional: #KEYS not a multiple of five): the queue's set of
  consumer groups, so that the sweeper reaps members only where groups exist
  ARGV[1] dedupe window ms (acked ids older than it are trimmed)
  returns: one bitmask per shard, in KEYS order: 1 = expired deliveries to requeue (or
           messages pushed with an expiry, past it: lib/lapse.lua),
           2 = due delayed messages to promote, 4 = acked ids to trim, 8 = a recurring
           message's current tick has come (its next one may need pushing); 0 = nothing;
           then, with the optional key, the number of consumer groups
  uses: lib/bounds.lua lib/clock.lua lib/pin.lua
  flags: no-writes
]]
local function due_by(key, upto)  -- its first entry (never the pin) is due at `upto`
  local first = head(key)
  return first[2] ~= nil and tonumber(first[2]) <= upto
end
local window = int(ARGV[1], 0, MAX_MS)
local registry = #KEYS % 5 == 1
if not (fits(#KEYS - (registry and 1 or 0), 5, 5, CALL_SHARDS - 1) and #ARGV == 1
        and window) then
  return BOUNDS
end
local now = now_ms()
local out = {}
for g = 1, GROUPS do
  local k = group_keys(g)
  out[g] = ((due_by(k.unack, now) or due_by(k.expiry, now)) and 1 or 0)
    + (due_by(k.delayed, now) and 2 or 0)
    + (due_by(k.done, now - window) and 4 or 0) + (due_by(k.marks, now) and 8 or 0)
end
if registry then out[#out + 1] = redis.call('SCARD', K.registry) end
return out
