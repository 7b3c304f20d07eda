--[[ lib/hint: when a shard that had nothing to deliver may have something: a pop's hint
  (pop, kpop), so that a waiting consumer naps until then at most.
  uses: lib/pin.lua lib/debounce.lua
  wait_hint(delayed, unack, now, best) -> ms until the first due time in `delayed` (a
    held debounced message's too) or deadline in `unack` (0 when it has passed), or
    `best` when that is sooner (-1: none)
]]
local function wait_hint(delayed, unack, now, best)
  local firsts = {first_due(delayed), tonumber(head(unack)[2])}
  for i = 1, 2 do  -- (ipairs would stop at the first nil)
    local at = firsts[i]
    if at then
      local ms = math.max(at - now, 0)
      if best < 0 or ms < best then best = ms end
    end
  end
  return best
end
