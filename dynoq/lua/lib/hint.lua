--[[ lib/hint: when a shard that had nothing to deliver may have something: a pop's hint
  (pop, kpop), so that a waiting consumer naps until then at most.
  uses: lib/pin.lua
  wait_hint(delayed, unack, now, best) -> ms until the first due time in `delayed` or
    deadline in `unack` (0 when it has passed), or `best` when that is sooner (-1: none)
]]
local function wait_hint(delayed, unack, now, best)
  for _, key in ipairs({delayed, unack}) do
    local first = head(key)
    if first[2] then
      local ms = math.max(tonumber(first[2]) - now, 0)
      if best < 0 or ms < best then best = ms end
    end
  end
  return best
end
