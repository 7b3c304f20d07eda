--[[ lib/rank: what one shard could deliver now, for a pop across shards (probe, pop).
  uses: lib/pin.lua lib/record.lua lib/debounce.lua
  rank_of(ready, delayed, unack, now, rest) -> rank, hint
    rank: 0 nothing deliverable; 1 + p when its next ready message has priority p; 1 (as
    for priority 0) when due delayed messages or expired deliveries wait for a pop to
    bring them back (their priority is read only then), or keys whose rest ended in
    `rest` (a keyed shard's krest, lib/krate.lua; nil: none)
    hint: ms until something may become deliverable there (-1: unknown)
]]
local function rank_of(ready, delayed, unack, now, rest)
  local best, hint = 0, -1
  local top = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if top[2] then best = rank(top[2]) end
  local firsts = {first_due(delayed), tonumber(head(unack)[2]), rest and tonumber(head(rest)[2])}
  for i = 1, 3 do  -- (ipairs would stop at the first nil)
    local at = firsts[i]
    if at then
      local ms = at - now
      if ms <= 0 then best = 1 elseif hint < 0 or ms < hint then hint = ms end
    end
  end
  return best, hint
end
