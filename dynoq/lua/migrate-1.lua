--[[ migrate: upgrade a queue's (or topic's) storage layout in place, one step after the
  other up to the caller's layout (docs/compatibility.md). A queue already there, or at a
  later layout (a newer dynoq wrote it), is left as it is. Steps so far: 1 -> 2 writes
  the "layout" field (a queue stored before it existed has none).
  KEYS[1] meta (the queue's settings hash; field "layout" holds its storage layout)
  ARGV[1] the layout to upgrade to (the caller's)
  returns: {the layout before, the layout after} ({0, 0}: no such queue)
  uses: lib/bounds.lua
  flags: allow-oom
]]
local to = int(ARGV[1], 1, EXACT)
if not (#KEYS == 1 and #ARGV == 1 and to) then return BOUNDS end
if redis.call('EXISTS', K.meta) == 0 then
  return {0, 0}
end
local held = redis.call('HGET', K.meta, 'layout')
local before = held and (tonumber(held) or 0) or 1
if before < 1 or before >= to then
  return {before, before}
end
local layout = before
if layout == 1 and to >= 2 then
  layout = 2
end
if layout ~= before then
  redis.call('HSET', K.meta, 'layout', layout)
end
return {before, layout}
