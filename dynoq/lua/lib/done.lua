--[[ lib/done: the acked ids a shard remembers for its dedupe window, `done` (zset id ->
  ack time ms): push-if-absent refuses an id acked within the window (lib/push.lua,
  lib/kadd.lua). An ack remembers what it acked (ack, kack); the sweeper's trim forgets.
  uses: lib/clock.lua lib/bulk.lua
  remember_acked(done, ids, window, acked) stamps `ids` (just acked, `acked` of them)
    with now, and forgets a bounded number of ids older than the window: at most what
    was added, plus some
  forget_acked(done, upto, limit) -> how many ids acked at or before `upto` (ms) it
    forgot, at most `limit`
]]
local function forget_acked(done, upto, limit)
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', upto, 'LIMIT', 0, limit)
  bulk('ZREM', done, old)
  return #old
end

local function remember_acked(done, ids, window, acked)
  local now = now_ms()
  local stamps = {}
  for _, id in ipairs(ids) do
    stamps[#stamps + 1] = now
    stamps[#stamps + 1] = id
  end
  bulk('ZADD', done, stamps)
  forget_acked(done, now - window, acked + 10)
end
