--[[ push: add messages to one shard (plain push = upsert by id; ensure = push if absent).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  ARGV[1] mode: "push" (replace a message with the same id) or "ensure" (skip it)
  ARGV[2] dedupe window in ms (ensure skips ids acked within it; 0 = off)
  ARGV[3] wake channel (PUBLISHed when anything was added)
  ARGV[4..] groups of four: id, delay ms, priority, msgpack body
  returns: array of 1 (pushed) / 0 (skipped by ensure), one per message
  uses: lib/promote.lua
]]
local delayed, ready, unack, msgs, dlv, dead, seq, done =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local ensure, window = ARGV[1] == 'ensure', tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Promote what is due first, so ready order is exactly "became ready first".
promote(delayed, ready, msgs, dlv, seq, now, 5000)

local n = (#ARGV - 3) / 4
local base = redis.call('INCRBY', seq, n) - n
local out, hset, zready, zdelayed, seen = {}, {}, {}, {}, {}
for i = 1, n do
  local j = 4 + (i - 1) * 4
  local id, delay, prio = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local skip = false
  if seen[id] then
    skip = true -- the same id twice in one call: the first one counts
  elseif redis.call('HEXISTS', msgs, id) == 1 then
    if ensure then
      skip = true
    else -- replace: the old copy leaves every state, its deliveries become stale
      redis.call('ZREM', ready, id); redis.call('ZREM', delayed, id)
      redis.call('ZREM', unack, id); redis.call('ZREM', dead, id)
      redis.call('HDEL', dlv, id)
    end
  elseif ensure and window > 0 then
    local acked = redis.call('ZSCORE', done, id)
    skip = acked ~= false and tonumber(acked) + window > now
  end
  if skip then
    out[i] = 0
  else
    seen[id] = true
    out[i] = 1
    hset[#hset + 1] = id
    hset[#hset + 1] = string.format('%d,%d,%d,', now, delay, prio) .. ARGV[j + 3]
    if delay > 0 then
      zdelayed[#zdelayed + 1] = now + delay
      zdelayed[#zdelayed + 1] = id
    else
      zready[#zready + 1] = prio * PRIO + base + i
      zready[#zready + 1] = id
    end
  end
end
if #hset > 0 then
  redis.call('HSET', msgs, unpack(hset))
  if #zready > 0 then redis.call('ZADD', ready, unpack(zready)) end
  if #zdelayed > 0 then redis.call('ZADD', delayed, unpack(zdelayed)) end
  redis.call('PUBLISH', ARGV[3], '1')
end
return out
