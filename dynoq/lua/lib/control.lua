--[[ lib/control: a cancel asked of a running delivery, and its progress, kept in the
  shard's `control` hash while the delivery runs: `x:<id>` (when the cancel was asked, ms,
  by lua/cancel-9.lua, kcancel-13 or task-cancel-10) and `p:<id>` (the last progress its
  handler reported, JSON text, by lua/steer-3.lua). A delivery asked to stop never runs
  again: whatever ends it next (its consumer's nack, its visibility running out, a lease
  takeover) ends it "cancelled" instead (counted in `counts`).
  uses: lib/bulk.lua lib/clock.lua lib/debounce.lua
  ask(control, id) -> asks the delivery of `id` to stop (its `x:` field: since when)
  asked(control, id) -> true when a cancel was asked of the delivery of `id`
  forget(control, ids) -> deletes both fields of each id (its delivery ended or went back)
  cancelled(msgs, dlv, why, counts, control, id) -> the message (already out of `unack`)
    deleted from msgs, dlv and why as a cancel ends it, counted, its fields forgotten
  cancel_plain(K, id) -> a cancel on a concurrent or ordered shard (K: unack, ready,
    delayed, msgs, dlv, why, counts, control): 2 when `id` runs (asked to stop), 1 when
    it waited (taken off, ended cancelled), 0 neither (nothing changed). A debounced
    copy held behind it (lib/debounce.lua) waits: it is taken off too
]]
local function ask(control, id)
  redis.call('HSET', control, 'x:' .. id, now_ms())
end

local function asked(control, id)
  return redis.call('HEXISTS', control, 'x:' .. id) == 1
end

local function forget(control, ids)
  if #ids == 0 or redis.call('EXISTS', control) == 0 then return end
  local fields = {}
  for _, id in ipairs(ids) do
    fields[#fields + 1] = 'x:' .. id
    fields[#fields + 1] = 'p:' .. id
  end
  bulk('HDEL', control, fields)
end

local function cancelled(msgs, dlv, why, counts, control, id)
  redis.call('HDEL', msgs, id)
  redis.call('HDEL', dlv, id)
  redis.call('HDEL', why, id)
  redis.call('HDEL', control, 'x:' .. id, 'p:' .. id)
  redis.call('HINCRBY', counts, 'cancelled', 1)
end

local function cancel_plain(K, id)
  local held = dcancel(K, id)
  if redis.call('ZSCORE', K.unack, id) then
    ask(K.control, id)
    return 2
  end
  if redis.call('ZREM', K.ready, id) + redis.call('ZREM', K.delayed, id) == 0 then return held end
  cancelled(K.msgs, K.dlv, K.why, K.counts, K.control, id)
  return 1
end
