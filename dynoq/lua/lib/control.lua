--[[ lib/control: a cancel asked of a running delivery, and its progress, kept in the
  shard's `control` hash while the delivery runs: `x:<id>` (when the cancel was asked, ms,
  by lua/cancel-9.lua, kcancel-13 or task-cancel-10) and `p:<id>` (the last progress its
  handler reported, JSON text, by lua/steer-3.lua). A delivery asked to stop never runs
  again: whatever ends it next (its consumer's nack, its visibility running out, a lease
  takeover) ends it "cancelled" instead (counted in `counts`).
  uses: lib/bulk.lua
  asked(control, id) -> true when a cancel was asked of the delivery of `id`
  forget(control, ids) -> deletes both fields of each id (its delivery ended or went back)
  cancelled(K, id, counts) -> the message (already out of `unack`) deleted from msgs, dlv
    and why as a cancel ends it, counted, its fields forgotten
]]
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
