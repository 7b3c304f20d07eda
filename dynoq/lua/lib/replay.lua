--[[ lib/replay: which dead letters a replay takes (replay, kreplay).
  dead_ids(dead, args, from, limit) -> the ids `args` names from index `from` on, or when
    it names none the oldest `limit` of the `dead` zset
]]
local function dead_ids(dead, args, from, limit)
  if #args < from then return redis.call('ZRANGE', dead, 0, limit - 1) end
  local ids = {}
  for j = from, #args do ids[#ids + 1] = args[j] end
  return ids
end
