--[[ pop: claim up to `count` messages of one shard for a visibility timeout.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] lease
  ARGV[1] count    ARGV[2] visibility timeout ms
  ARGV[3] nonce (random per call; with the attempt number it makes the delivery token)
  ARGV[4] "1" for an ordered queue (one batch in flight per shard, retries block it)
  ARGV[5] lease token of the caller ("" = none)   ARGV[6] max retries
  returns: {1, hint, id, record, attempts, token, ...} with hint = -1
           {0, hint}  nothing deliverable; hint = ms until something may be (-1 = unknown)
           {-1}       the caller's lease is gone (fenced), or another consumer leases it
  uses: lib/promote.lua
]]
local delayed, ready, unack, msgs, dlv, dead, seq, lease =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local count, vis, nonce = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local ordered, token, max_retries = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])

if token ~= '' or ordered then
  local holder = redis.call('GET', lease)
  if (token ~= '' and holder ~= token) or (token == '' and holder) then return {-1} end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Deliveries whose visibility ran out go back (or to the dead set): bounded work.
local expired = redis.call('ZRANGEBYSCORE', unack, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 100)
for i = 1, #expired, 2 do
  local id = expired[i]
  local d = redis.call('HGET', dlv, id)
  redis.call('ZREM', unack, id)
  if d and tonumber(string.match(d, '^(%d+)')) > max_retries then
    redis.call('ZADD', dead, now, id)
  else
    redis.call('ZADD', delayed, expired[i + 1], id)
  end
end

-- Promote what is due (a requeued message keeps its saved place).
promote(delayed, ready, msgs, dlv, seq, now, 5000)

local function hint()
  local best = -1
  for _, key in ipairs({delayed, unack}) do
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if head[2] then
      local ms = math.max(tonumber(head[2]) - now, 0)
      if best < 0 or ms < best then best = ms end
    end
  end
  return best
end

-- An ordered shard delivers nothing while a message is in flight or waits for a retry.
if ordered and (redis.call('ZCARD', unack) > 0 or redis.call('ZCARD', delayed) > 0) then
  return {0, hint()}
end
local popped = redis.call('ZPOPMIN', ready, count)
if #popped == 0 then return {0, hint()} end
local ids = {}
for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
local recs = redis.call('HMGET', msgs, unpack(ids))
local dlvs = redis.call('HMGET', dlv, unpack(ids))
local out, unacks, states = {1, -1}, {}, {}
for k, id in ipairs(ids) do
  local rec = recs[k]
  if rec then
    local d = dlvs[k]
    local attempts = (d and tonumber(string.match(d, '^(%d+)')) or 0) + 1
    local tok = nonce .. '.' .. attempts
    states[#states + 1] = id
    states[#states + 1] = string.format('%d|%d|', attempts, tonumber(popped[2 * k])) .. tok
    unacks[#unacks + 1] = now + vis
    unacks[#unacks + 1] = id
    out[#out + 1] = id
    out[#out + 1] = rec
    out[#out + 1] = attempts
    out[#out + 1] = tok
  end
end
if #unacks > 0 then
  redis.call('ZADD', unack, unpack(unacks))
  redis.call('HSET', dlv, unpack(states))
end
return out
