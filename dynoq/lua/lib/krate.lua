--[[ lib/krate: a keyed queue's key_rate_limit (DESIGN §3.9): each key is delivered at
  most once every `gap` ms (period / count), enforced where messages are delivered, for
  every consumer: no period holds more than count + 1 deliveries of a key. A cell rate
  without a burst: `krate` holds each key's earliest next delivery (ms); a key served at
  `now` may be served again at max(that time, now) + gap. A key whose turn comes before
  its time rests in `krest`, scored by that time, instead of holding a turn in `kturn`;
  a pop puts the keys whose rest ended back in line (a new turn behind the keys waiting,
  kstore's rule), and a consumer with nothing to take naps until the first ends.
  uses: lib/bulk.lua lib/kstore.lua lib/pin.lua
  K: the shard's keys by name (krate, krest, and kstate, kturn, seq for kstore)
  REST_LIMIT  keys one take may send to rest (lib/ktake.lua), each a few commands
  rgap(count, period) -> ms between two deliveries of a key (count 0: nil, no limit)
  rhold(K, keys, turns, now) -> the keys of `keys` (popped from kturn) that may be served
    now, in order, and key -> its stored time; the others rest in krest
  rserved(K, served, times, now, gap) -> the next time of each served key written
  rwake(K, now, conc, limit) -> at most `limit` keys whose rest ended back in line (those
    that still may deliver), and at most `limit` times gone by dropped from krate
  rnext(K, now) -> ms until the first resting key may deliver (-1: none rests)
]]
local REST_LIMIT = 1000

local function rgap(count, period)
  if count == 0 then return nil end
  return period / count
end

local function rhold(K, keys, turns, now)
  local times = bulk_read('ZMSCORE', K.krate, keys)
  local go, at, rest = {}, {}, {}
  for i, key in ipairs(keys) do
    local t = times[i] and tonumber(times[i])
    if t and t > now then
      rest[#rest + 1] = t
      rest[#rest + 1] = key
    else
      go[#go + 1] = key
      at[key] = t
    end
  end
  bulk('ZADD', K.krest, rest)
  return go, at
end

local function rserved(K, served, times, now, gap)
  local z = {}
  for _, key in ipairs(served) do
    z[#z + 1] = math.max(times[key] or now, now) + gap
    z[#z + 1] = key
  end
  bulk('ZADD', K.krate, z)
end

local function rwake(K, now, conc, limit)
  local due = redis.call('ZRANGEBYSCORE', K.krest, '-inf', now, 'LIMIT', 0, limit)
  if #due > 0 then
    bulk('ZREM', K.krest, due)
    kstore(K, due, kload(K, due), conc)
  end
  local old = redis.call('ZRANGEBYSCORE', K.krate, '-inf', now, 'LIMIT', 0, limit)
  bulk('ZREM', K.krate, old)
end

local function rnext(K, now)
  local first = head(K.krest)
  if not first[2] then return -1 end
  return math.max(math.ceil(tonumber(first[2]) - now), 0)
end
