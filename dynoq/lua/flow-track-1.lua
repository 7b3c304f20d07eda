--[[ flow-track: the flows running under a prefix, as the sweeper finds them
  (dynoq/_core/flows.py): a flow's start adds it, its end or cancel takes it off, and a
  sweeper that looked at it says when it looks again. Each entry is scored by when a
  sweeper looks at it next (ms, the server's clock). A flow ends or expires within its
  lifetime, so an entry older than that is of a flow gone (its ender died): a start drops
  up to MAX_BATCH of them, and the set stays as large as the flows running.
  KEYS[1] running
  ARGV[1] "start", "end" or "next"  ARGV[2] the flow's id
  ARGV[3] ms from now to its next look (start: its first, after its plan is stored)
  ARGV[4] start: ms a flow may run; else 0
  returns: 1 done, 0 nothing to do (start: tracked before; end, next: not tracked)
  uses: lib/bounds.lua lib/clock.lua
  flags: allow-oom
]]
local what, id = ARGV[1], ARGV[2]
if not (#KEYS == 1 and #ARGV == 4 and (what == 'start' or what == 'end' or what == 'next')
        and #id >= 1 and int(ARGV[3], 0, MAX_MS) and int(ARGV[4], 0, MAX_MS)) then
  return BOUNDS
end
-- any entry may be taken off (one planted by a raw ZADD too: a sweeper drops it)
if what == 'end' then return redis.call('ZREM', K.running, id) end
if #id > 64 or string.find(id, '[{}]') then return BOUNDS end
local now = now_ms()
if what == 'next' then return redis.call('ZADD', K.running, 'XX', 'CH', now + ARGV[3], id) end
local gone = redis.call('ZRANGEBYSCORE', K.running, '-inf', now - ARGV[4], 'LIMIT', 0, MAX_BATCH)
if #gone > 0 then redis.call('ZREM', K.running, unpack(gone)) end
return redis.call('ZADD', K.running, 'NX', now + ARGV[3], id)
