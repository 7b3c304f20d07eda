--[[ lib/kstore: message-group keys' states (lib/kstate.lua) read from a keyed shard's
  `kstate` and written back; a key written back that may deliver (waiting messages,
  fewer than key_concurrency in flight) gets a turn in `kturn` (lib/keyed.lua).
  uses: lib/kstate.lua lib/bulk.lua
  K: the shard's keys by name (kstate, kturn, seq here); conc: the queue's key_concurrency
  kget(K, key) -> a key's state {in flight, waiting, last id, head, tail}
  kput(K, key, s, conc, turn, untake) writes it back; turn: its score when it may deliver
    (nil: a new one from seq, unless it has one); untake: a key that may no longer deliver
    loses its turn. Returns whether it may deliver
  kfree(K, key, conc, turn) -> one of a key's deliveries ended (dead-lettered): its slot
    is free, the key written back with kput
  kload(K, keys) -> key -> state, in one HMGET; kstore(K, order, st, conc, holding, keep)
    writes them back and gives the keys that may deliver a new turn (ZADD NX: a key that
    has a turn keeps it), but not those of `holding` (a set, or nil): keys whose
    messages waited before the step (a push's), which hold one already when they may
    deliver (lib/keyed.lua's rule), so the ZADD would only repeat it; `keep` (key -> turn,
    or nil): keys that go back to the turn named instead (lib/kweight.lua's rounds).
    Returns how many got one
  kfreed(K, order, freed, conc, keep) -> the same for keys whose deliveries ended
    (freed[key] of them each; an ack): only the in-flight counts change (kcount), the
    rest of each value is written back as it was read
]]
-- Whether a key's state goes (nothing waits or is in flight) and whether the key may
-- deliver: the one rule of kput and kwrite (kstore, kfreed).
local function kfate(f, w, conc)
  return f <= 0 and w <= 0, w > 0 and f < conc
end

local function kget(K, key)
  return kunpack(redis.call('HGET', K.kstate, key))
end

-- Only a removal (kdrop) can make a key that has a turn unable to deliver, so only
-- `untake` takes a turn away.
local function kput(K, key, s, conc, turn, untake)
  local kstate, kturn, seq = K.kstate, K.kturn, K.seq
  local gone, ready = kfate(s[1], s[2], conc)
  if gone then
    redis.call('HDEL', kstate, key)
  else
    redis.call('HSET', kstate, key, kpack(s))
  end
  if ready then
    if turn then
      redis.call('ZADD', kturn, turn, key)
    elseif not redis.call('ZSCORE', kturn, key) then  -- a key that has a turn keeps it
      redis.call('ZADD', kturn, redis.call('INCR', seq), key)
    end
    return true
  end
  if untake then redis.call('ZREM', kturn, key) end
  return false
end

local function kfree(K, key, conc, turn)
  local s = kget(K, key)
  s[1] = s[1] - 1
  kput(K, key, s, conc, turn)
end

-- Bulk forms for the hot paths (kack, ktake): the states of many keys in one HMGET, and
-- back in one HSET / HDEL, the keys that may deliver given new turns in one ZADD NX.
local function kload(K, keys)
  local st = {}
  if #keys == 0 then return st end
  local raw = bulk_read('HMGET', K.kstate, keys)
  for i, key in ipairs(keys) do st[key] = kunpack(raw[i]) end
  return st
end

-- Keys' states written back (one HSET, one HDEL) and the keys that may deliver given new
-- turns behind every key waiting (one INCRBY, ZADD NX: a key that has a turn keeps it),
-- but not those of `holding`, those of `keep` at their own; state(i, key) -> in flight,
-- waiting, value of the i-th key. How many keys got a turn.
local function kwrite(K, order, conc, state, holding, keep)
  local sets, dels, ready = {}, {}, {}
  for i, key in ipairs(order) do
    local f, w, value = state(i, key)
    local gone, may = kfate(f, w, conc)
    if gone then
      dels[#dels + 1] = key
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = value
    end
    if may and not (holding and holding[key]) then ready[#ready + 1] = key end
  end
  bulk('HSET', K.kstate, sets)
  bulk('HDEL', K.kstate, dels)
  local added = 0
  if #ready > 0 then
    local base = redis.call('INCRBY', K.seq, #ready) - #ready
    local z = {}
    for i, key in ipairs(ready) do
      z[#z + 1] = keep and keep[key] or base + i
      z[#z + 1] = key
    end
    for i = 1, #z, 4000 do
      added = added + redis.call('ZADD', K.kturn, 'NX', unpack(z, i, math.min(i + 3999, #z)))
    end
  end
  return added
end

local function kstore(K, order, st, conc, holding, keep)
  return kwrite(K, order, conc, function(_, key)
    local s = st[key]
    return s[1], s[2], kpack(s)
  end, holding, keep)
end

local function kfreed(K, order, freed, conc, keep)
  if #order == 0 then return 0 end
  local raw = bulk_read('HMGET', K.kstate, order)
  return kwrite(K, order, conc, function(i, key)
    local f, w, rest = kcount(raw[i])
    f = f - freed[key]
    return f, w, krecount(f, rest)
  end, nil, keep)
end
