--[[ open: store a queue's (or topic's) settings on first open, with a new epoch and this
  version's storage layout; return the stored ones. The epoch names this creation of the
  queue: "<13-digit ms><8 hex>" (the server's clock, then the caller's random suffix), so
  a later creation has a later one. A queue stored before epochs existed gets one now
  (docs/internals.md). A queue stored in a layout the caller does not read is refused
  before anything is written (no "layout" field: layout 1; docs/compatibility.md).
  KEYS[1] meta (the queue's settings hash; field "epoch" holds its epoch, "layout" its
          storage layout)
  ARGV[1] random suffix of a new epoch (8 hex digits)
  ARGV[2] the oldest layout the caller reads
  ARGV[3] the newest layout the caller reads, written into a queue this call creates
  ARGV[4..] field, value pairs to store when the queue does not exist yet
  returns: {1 if this call created the queue else 0, field, value, ...} (the stored hash),
           or {-1, the stored layout} when the caller does not read it (0: unreadable)
  uses: lib/bounds.lua lib/clock.lua
  flags: allow-oom
]]
local oldest, newest = int(ARGV[2], 0, EXACT), int(ARGV[3], 0, EXACT)
if not (#KEYS == 1 and fits(#ARGV, 3, 2, MAX_FIELDS) and oldest and newest) then
  return BOUNDS
end
local created = 0
if redis.call('EXISTS', K.meta) == 0 then
  redis.call('HSET', K.meta, 'layout', ARGV[3], unpack(ARGV, 4))
  created = 1
else
  -- More fields than an open stores were not written by dynoq: not read whole (HGETALL)
  if redis.call('HLEN', K.meta) > MAX_FIELDS + 2 then return BOUNDS end
  local layout = redis.call('HGET', K.meta, 'layout')
  layout = layout and (tonumber(layout) or 0) or 1
  if layout < oldest or layout > newest then
    return {-1, layout}
  end
end
if redis.call('HEXISTS', K.meta, 'epoch') == 0 then
  redis.call('HSET', K.meta, 'epoch', string.format('%013d', now_ms()) .. ARGV[1])
end
local out = redis.call('HGETALL', K.meta)
table.insert(out, 1, created)
return out
