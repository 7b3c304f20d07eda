--[[ lib/promote: move what is due from `delayed` to `ready`, in due-time order.
  uses: lib/delivery.lua lib/bulk.lua lib/record.lua
  promote(delayed, ready, msgs, dlv, seq, now, limit) -> number of messages promoted
    A message given back keeps the ready score saved in its delivery state (its old
    place); any other takes a fresh one, after everything that became ready before it.
]]
local function promote(delayed, ready, msgs, dlv, seq, now, limit)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  local base = redis.call('INCRBY', seq, #due) - #due
  local states = bulk_read('HMGET', dlv, due)
  local args = {}
  for i, id in ipairs(due) do
    local _, score = delivery(states[i])
    if score == '' then
      local rec = redis.call('HGET', msgs, id)
      local prio = priority(rec)
      score = prio * PRIO + base + i
    end
    args[#args + 1] = score
    args[#args + 1] = id
  end
  bulk('ZADD', ready, args)
  bulk('ZREM', delayed, due)
  return #due
end
