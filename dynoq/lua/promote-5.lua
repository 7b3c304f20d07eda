--[[ promote: move due delayed messages of one shard to ready, bounded (the sweeper's step;
  pop and push do the same first). A requeued message keeps its saved place.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] msgs  KEYS[4] dlv  KEYS[5] seq
  ARGV[1] limit (most messages moved by this call)
  returns: {promoted, 1 if more may be due else 0}
]]
local delayed, ready, msgs, dlv, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local PRIO = 70368744177664 -- 2^46: priority in the high bits, ready sequence below

local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
if #due > 0 then
  local base = redis.call('INCRBY', seq, #due) - #due
  local args = {}
  for i, id in ipairs(due) do
    local d = redis.call('HGET', dlv, id)
    local keep = d and string.match(d, '^%d*|(%d+)|')
    local score = keep
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
end
local more = 0
if #due == limit then more = 1 end
return {#due, more}
