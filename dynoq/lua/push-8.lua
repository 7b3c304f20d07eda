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
local out, zready, zdelayed, seen = {}, {}, {}, {}
local pushed = 0
for i = 1, n do
  local j = 4 + (i - 1) * 4
  local id, delay, prio = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
  local rec = string.format('%d,%d,%d,', now, delay, prio) .. ARGV[j + 3]
  local added = false
  if seen[id] then
    added = false -- the same id twice in one call: the first one counts
  elseif ensure then
    local acked = window > 0 and redis.call('ZSCORE', done, id)
    if not (acked and tonumber(acked) + window > now) then -- not acked within the window
      added = redis.call('HSETNX', msgs, id, rec) == 1
    end
  else
    if redis.call('HSET', msgs, id, rec) == 0 then
      -- replaced: the old copy leaves every state, its deliveries become stale
      redis.call('ZREM', ready, id); redis.call('ZREM', delayed, id)
      redis.call('ZREM', unack, id); redis.call('ZREM', dead, id)
      redis.call('HDEL', dlv, id)
    end
    added = true
  end
  if added then
    seen[id] = true
    pushed = pushed + 1
    out[i] = 1
    if delay > 0 then
      zdelayed[#zdelayed + 1] = now + delay
      zdelayed[#zdelayed + 1] = id
    else
      zready[#zready + 1] = prio * PRIO + base + i
      zready[#zready + 1] = id
    end
  else
    out[i] = 0
  end
end
if pushed > 0 then
  if #zready > 0 then redis.call('ZADD', ready, unpack(zready)) end
  if #zdelayed > 0 then redis.call('ZADD', delayed, unpack(zdelayed)) end
  redis.call('PUBLISH', ARGV[3], '1')
end
return out
