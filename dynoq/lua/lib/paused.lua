--[[ lib/paused: a paused queue delivers nothing (lua/pause-2.lua writes the flag into each
  shard, where the scripts that deliver read it with the keys they already read).
  paused(control) -> true while the shard's `control` hash holds `paused`
  idle_reply(others) -> what a pop that found nothing replies, {0, -1, 0} (no hint: the
    consumer naps until woken, as on an empty queue), with `others` ranks of 0 after it
]]
local function paused(control)
  return redis.call('HEXISTS', control, 'paused') == 1
end

local function idle_reply(others)
  local out = {0, -1, 0}
  for i = 1, others do out[3 + i] = 0 end
  return out
end
