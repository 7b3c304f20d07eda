--[[ lib/promote: shared by the scripts whose header says "uses: lib/promote.lua";
  dynoq/scripts.py puts this file in front of them when it loads them.
  PRIO    2^46: a ready score is priority * PRIO + the shard's ready sequence
  promote(delayed, ready, msgs, dlv, seq, now, limit) -> number of messages promoted
    Moves what is due from `delayed` to `ready`, in due-time order. A requeued message
    keeps the ready score saved in `dlv` (its old place); any other takes a fresh one.
]]
local PRIO = 70368744177664

local function promote(delayed, ready, msgs, dlv, seq, now, limit)
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  if #due == 0 then return 0 end
  local base = redis.call('INCRBY', seq, #due) - #due
  local states = redis.call('HMGET', dlv, unpack(due))
  local args = {}
  for i, id in ipairs(due) do
    local score = states[i] and string.match(states[i], '^%d*|(%d+)|')
    if not score then
      local rec = redis.call('HGET', msgs, id)
      local prio = rec and tonumber(string.match(rec, '^%d+,%d+,(%d+),')) or 0
      score = prio * PRIO + base + i
    end
    args[#args + 1] = score
    args[#args + 1] = id
  end
  redis.call('ZADD', ready, unpack(args))
  redis.call('ZREM', delayed, unpack(due))
  return #due
end
