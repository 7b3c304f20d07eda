--[[ lib/firsts: the messages of a push call that may go in: the first of each id (push,
  publish and push-batch into a queue, lib/push.lua; into a keyed one, lib/kadd.lua).
  first_ids(items, from, step, out, skip) -> ids, at: of the flat list `items` (from
    index `from` on, `step` values a message, its id first), the first message of each
    id not in `skip` (a set of ids, or nil): the ids, and each one's place in the list
    (1 for the first message); out[i] = 0 for every message
]]
local function first_ids(items, from, step, out, skip)
  local seen, ids, at = {}, {}, {}
  for i = 1, math.floor((#items - from + 1) / step) do
    local id = items[from + step * (i - 1)]
    out[i] = 0
    if not (seen[id] or (skip and skip[id])) then
      seen[id] = true
      ids[#ids + 1] = id
      at[#at + 1] = i
    end
  end
  return ids, at
end
