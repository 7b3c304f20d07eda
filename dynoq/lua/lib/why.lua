--[[ lib/why: why a message failed, kept in the shard's `why` hash until it is acked,
  removed or purged: "<first failed ms>,<last failed ms>,<kind>,<detail>", where kind is
  "e" (detail: msgpack [error type, message, traceback, consumer], made by the consumer),
  "x" (its visibility ran out: no consumer said why), "r" (a keyed shard's pop met a
  record that does not name the key it waits in: lib/keyed.lua ktake) or "l" (it was not
  delivered before its expiry: lib/lapse.lua; detail: its expiry in ms).
  record_why(why, id, now, kind, detail)  keeps the first failure time of an earlier entry
]]
local function record_why(why, id, now, kind, detail)
  local old = redis.call('HGET', why, id)
  local first = old and string.match(old, '^(%d+),') or now
  redis.call('HSET', why, id, first .. ',' .. now .. ',' .. kind .. ',' .. detail)
end
