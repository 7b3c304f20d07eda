--[[ task-keep: keep what ended tasks leave (dynoq.Tasks' keep_result), each record for its
  own time; sent with the tasks' acks, just before them, in their round trip.
  KEYS[1] result
  KEYS[1..] repeated: one per task, every one in the slot of one shard
  ARGV pairs, one per key: ms to keep it (0: write nothing: a call that only makes the
       server load this script, see dynoq/_core/tasks.py load_keep), the record
  returns: how many were kept
  uses: lib/bounds.lua
  flags: allow-oom
]]
if not (fits(#KEYS, 1, 1, MAX_BATCH - 1) and #ARGV == 2 * #KEYS) then return BOUNDS end
for i = 1, #ARGV, 2 do
  if not int(ARGV[i], 0, MAX_MS) then return BOUNDS end
end
local kept = 0
for g = 1, GROUPS do
  if ARGV[2 * g - 1] ~= '0' then
    local result = group_keys(g).result
    redis.call('SET', result, ARGV[2 * g], 'PX', ARGV[2 * g - 1])
    kept = kept + 1
  end
end
return kept
