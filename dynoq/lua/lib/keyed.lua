--[[ lib/keyed: message groups (ordered="key", DESIGN §3.5): order per key, no
  head-of-line blocking. Shared by kpush, kpop, kack, knack, kremove, krequeue, kreplay,
  and by whatever else places a new message into a keyed shard (a transaction's commit).
  uses: lib/record.lua lib/delivery.lua lib/why.lua lib/bulk.lua lib/kstate.lua

  A keyed shard keeps, besides msgs/unack/dlv/delayed/dead/why of every queue:
  kwait   hash id -> "<#prev>|<prev><next>" for every waiting message: each key's waiting
          messages are a chain in push order (#prev: the byte length of the previous id;
          "" at either end), its ends in `kstate`. Every step is O(1) hash work at any
          number of keys: a pop unlinks a key's head, a push links a new tail, a removal
          joins its neighbours. A message given back (expired, retry due) goes back before
          the first waiting message of its key with a higher seq: a walk from the head of
          at most key_concurrency steps (only given-back messages can precede it). The
          head's <prev> is not kept up to date (nothing reads it). HLEN = waiting messages.
  kturn   zset key -> turn: the keys that may deliver now (waiting messages and fewer than
          key_concurrency in flight). A pop takes the lowest turn and, if the key may
          deliver more, gives it a new turn from the shard's `seq` (behind every key
          already waiting: round-robin). Keys given back (expired, retry due) take turn 0.
  kstate  hash key -> "<in flight>|<waiting>|<#last>|<#head>|<last><head><tail>" for every
          key with messages waiting or in flight (HLEN = the shard's keys): last, the last
          delivered id; head and tail, the ends of its chain in kwait ("" when none waits).
          Ids may hold any byte, so they are cut by their lengths; the key is the field,
          never parsed. A message waiting for its retry (in `delayed`) still holds its
          key's slot: the key is blocked.
  kfence  hash key -> fence, only once a key was taken over (an expired delivery given
          back); absent = 1. Kept when the key drains, so a fence never goes back.
  The record of a keyed message: "<enq>,0,0,K<len>:<key><seq>" + msgpack body (the body
  holds no key: codec.decode reads it from here), so any script finds a message's key and
  its seq from its id alone. Every walk of a chain is bounded, and a step to a link that
  is missing (a chain broken by hand) ends the key's chain: the state is mended (nothing
  waits), the key moves on.

  K: a table of the shard's keys by name (msgs, kwait, kturn, kstate, kfence, seq, unack,
     dlv, delayed, dead, why); conc: the queue's key_concurrency
  kseq(n) -> n as a string that sorts as the number: a letter for its length, base 36
  kseqs(first) -> a function returning kseq(first), kseq(first + 1), ... one a call
  kparse(rec) -> key, seq of a keyed record (nil when it is not one)
  kprepared(key) -> the header of a prepared (transactional) keyed record: its seq is
    kseq(0), which no placed message has; kreplaced(rec) -> true when a record has a place
    (a push replaced the prepared one); kbody(rec) -> the msgpack body after the header
  kplace(K, places, conc) -> writes messages' records and appends each to its key, in
    order; places: a flat list of id, key, body (without the key), enq, seq per message,
    ids in no state of the shard (new ones, or dead-lettered ones a replay took out)
  kdrop(K, id, rec, conc) -> removes a message from every state; its key moves on
  kback(K, s, id, seq, conc) -> links a given-back message into state s (its in-flight
    count already lowered) before the first waiting message of its key with a higher seq
  kexpire(K, now, limit, max_retries, conc) -> given back, dead-lettered, looked at
  kpromote(K, now, limit, conc) -> retries that fell due, back at the head of their key
  kget(K, key) -> a key's state {in flight, waiting, last id, head, tail}; kput writes it
  kload(K, keys) -> key -> state, in one HMGET; kstore(K, order, st, conc) writes them
    back and gives the keys that may deliver a new turn: returns how many got one
  ktake(K, count, deadline, nonce, conc, out, now) -> appends id, record, attempts, fence
    of up to `count` keys' heads to `out` (keys round-robin; deadline: a string, ms);
    returns how many, and how many it dead-lettered: a head whose record does not name
    its key (not written by dynoq: no script could find its key again to free it) is
    dead-lettered when K has dead and why (kpop), else left waiting and the take ends
  kadd(K, conc, ensure, window, now, items, from, out) -> how many were placed, whether
    the shard's waiters need a wake (it had no key ready), how many were refused (ensure:
    acked within `window` ms); places the first of each id of `items`
    (from index `from` on: id, key, body without the key), each last in its key: ensure
    skips an id that is stored, else its stored copy is replaced (it leaves every state
    first); out[i] = 1 for each placed, 0 for the others. K needs done and seq besides the
    keys kplace and kdrop use.
  kensure(k, conc, window, now, items, from, out) -> how many were placed, whether the
    shard's waiters need a wake (it had no key ready), and how many were refused (acked
    within the window): a topic's publish, Spark's push-batch (and a
    transaction's commit) into one group's keyed shard, push-if-absent (an id acked
    within `window` ms is skipped too). The caller counts them and wakes: _core/grants.py
    grants a role what every function its scripts call sends, so a write to counts here
    would be granted to every role whose scripts call kensure.
    k: {kwait, kturn, kstate, msgs, dlv, dead, seq, done, counts}; items: a flat list,
    from index `from` on, of id, key, body (without the key); out (optional): filled as
    kadd's
]]
local function kseq(n)
  local s = stamp(n)
  return string.char(96 + #s) .. s
end

-- Successive seqs from `first` on (kseq's form), one string each: a push places hundreds
-- of messages, and counting the digits up in place costs less than converting each number.
local function kseqs(first)
  local d = {string.byte(stamp(first), 1, -1)}  -- base 36 digits, as byte codes
  local n = #d
  return function()
    local out = string.char(96 + n, unpack(d))
    local i = n
    while true do  -- add one, carrying: '9' -> 'a', 'z' -> '0' and on to the next digit
      local c = d[i]
      if c == 57 then d[i] = 97 break
      elseif c ~= 122 then d[i] = c + 1 break end
      d[i] = 48
      i = i - 1
      if i == 0 then table.insert(d, 1, 49) n = n + 1 break end
    end
    return out
  end
end

-- A count as text, each written once a call: Lua formats a number with sprintf, which
-- cost more than the rest of a push's Lua together (the same lengths and counts recur).
local KN = {}
local function kn(n)
  local t = KN[n]
  if not t then
    t = string.format('%d', n)
    KN[n] = t
  end
  return t
end

local function kprefix(key)
  return kn(#key) .. ':' .. key
end

local function kparse(rec)
  local _, e, n = string.find(rec or '', '^%w+,%d+,%d+,K(%d+):')
  if not e then return nil end
  n = tonumber(n)
  local len = (string.byte(rec, e + n + 1) or 0) - 96
  if len < 1 then return nil end  -- a header cut short (not written by dynoq)
  return string.sub(rec, e + 1, e + n), string.sub(rec, e + n + 1, e + n + 1 + len)
end

local function kprepared(key)
  return 'K' .. kprefix(key) .. kseq(0)
end

local function kreplaced(rec)
  local _, seq = kparse(rec)
  return seq ~= nil and seq ~= kseq(0)
end

local function kbody(rec)
  local _, e, n = string.find(rec, '^%w+,%d+,%d+,K(%d+):')
  local at = e + tonumber(n) + 1
  return string.sub(rec, at + 1 + string.byte(rec, at) - 96)
end

-- A key's state: {in flight, waiting, last delivered id, head, tail}: kunpack (lib/kstate.lua).
local function kpack(s)
  if s[2] <= 0 then s[4], s[5] = '', '' end  -- nothing waits: no chain
  return kn(math.max(s[1], 0)) .. '|' .. kn(math.max(s[2], 0)) .. '|' .. kn(#s[3]) .. '|'
    .. kn(#s[4]) .. '|' .. s[3] .. s[4] .. s[5]
end

-- A link of kwait: prev, next ("" at either end).
local function lsplit(v)
  local n, at = string.match(v, '^(%d+)|()')
  if not n then return '', '' end
  n = tonumber(n)
  return string.sub(v, at, at + n - 1), string.sub(v, at + n)
end

local function lpack(prev, nxt)
  return kn(#prev) .. '|' .. prev .. nxt
end

-- Set one end of a link (which: 1 prev, 2 next); a missing link stays missing.
local function lset(kwait, id, which, to)
  local v = redis.call('HGET', kwait, id)
  if not v then return end
  local p, n = lsplit(v)
  if which == 1 then p = to else n = to end
  redis.call('HSET', kwait, id, lpack(p, n))
end

local function kget(K, key)
  return kunpack(redis.call('HGET', K.kstate, key))
end

-- Write a key's state back, and give it a turn when it may deliver. turn: its score
-- (nil: a new one from seq, unless it has one). Only a removal (kdrop) can make a key
-- that has a turn unable to deliver, so only `untake` takes a turn away.
local function kput(K, key, s, conc, turn, untake)
  local kstate, kturn, seq = K.kstate, K.kturn, K.seq
  local f, w = s[1], s[2]
  if f <= 0 and w <= 0 then
    redis.call('HDEL', kstate, key)
  else
    redis.call('HSET', kstate, key, kpack(s))
  end
  if w > 0 and f < conc then
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

local function kback(K, s, id, seq, conc)
  local kwait, msgs = K.kwait, K.msgs
  local prev, cur = '', (s[2] > 0 and s[4] or '')
  -- Only given-back messages can precede it: with it, they and those in flight (s[1], it
  -- no longer counted) are at most conc. With conc 1 it goes first, nothing read.
  for _ = 1, conc - 1 - s[1] do
    if cur == '' then break end
    local _, cs = kparse(redis.call('HGET', msgs, cur))
    if not cs or cs > seq then break end
    local v = redis.call('HGET', kwait, cur)
    if not v then break end
    prev = cur
    local _, n = lsplit(v)
    cur = n
  end
  redis.call('HSET', kwait, id, lpack(prev, cur))
  if prev == '' then s[4] = id else lset(kwait, prev, 2, id) end
  if cur == '' then s[5] = id else lset(kwait, cur, 1, id) end
  s[2] = s[2] + 1
end

local function kdrop(K, id, rec, conc)
  local msgs, kwait, unack, delayed, dead, dlv, why =
    K.msgs, K.kwait, K.unack, K.delayed, K.dead, K.dlv, K.why
  local key = kparse(rec)
  redis.call('ZREM', dead, id)
  redis.call('HDEL', dlv, id)
  redis.call('HDEL', why, id)
  redis.call('HDEL', msgs, id)
  if not key then
    redis.call('ZREM', unack, id); redis.call('ZREM', delayed, id)
    return
  end
  local s = kget(K, key)
  local link = redis.call('HGET', kwait, id)
  if link then
    local p, n = lsplit(link)
    redis.call('HDEL', kwait, id)
    local first = s[4] == id
    if first then p = '' end  -- the head's prev is not kept
    if first then s[4] = n else lset(kwait, p, 2, n) end
    if s[5] == id then s[5] = p else lset(kwait, n, 1, p) end
    s[2] = s[2] - 1
    if s[4] == '' then s[2] = 0 end  -- the chain ends here (mended if the count said more)
  elseif redis.call('ZREM', unack, id) + redis.call('ZREM', delayed, id) > 0 then
    s[1] = s[1] - 1
  else
    return
  end
  kput(K, key, s, conc, nil, true)
end

-- Messages to give back, each {id, key, seq}, in descending seq order: each then goes
-- back before the others of its key given back in the same call, at the head of its key,
-- in one step of kback's walk (which walks past given-back messages of a lower seq: in
-- ascending order a key's 1,000 expired deliveries took 500,000 steps, 1.5 s).
local function by_seq_desc(a, b)
  return a[3] > b[3]
end

local function kbacklog(msgs, ids)
  local recs = #ids > 0 and bulk_read('HMGET', msgs, ids) or {}
  local out = {}
  for i, id in ipairs(ids) do
    local key, seq = kparse(recs[i])
    out[i] = {id, key, seq or ''}
  end
  table.sort(out, by_seq_desc)
  return out
end

local function kexpire(K, now, limit, max_retries, conc)
  local msgs, kfence, unack, dlv, dead, why =
    K.msgs, K.kfence, K.unack, K.dlv, K.dead, K.why
  local items = redis.call('ZRANGEBYSCORE', unack, '-inf', now, 'LIMIT', 0, limit)
  local back, buried = 0, 0
  for _, m in ipairs(kbacklog(msgs, items)) do
    local id, key, seq = m[1], m[2], m[3]
    redis.call('ZREM', unack, id)
    if key then
      local s = kget(K, key)
      s[1] = s[1] - 1
      if attempts(redis.call('HGET', dlv, id)) > max_retries then
        redis.call('ZADD', dead, now, id)
        record_why(why, id, now, 'x', '')
        buried = buried + 1
      else
        -- Back at the head of its key; whoever takes it next takes the key over.
        kback(K, s, id, seq, conc)
        if redis.call('HSETNX', kfence, key, 2) == 0 then
          redis.call('HINCRBY', kfence, key, 1)
        end
        back = back + 1
      end
      kput(K, key, s, conc, 0)
    end
  end
  return back, buried, #items
end

local function kpromote(K, now, limit, conc)
  local msgs, delayed = K.msgs, K.delayed
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  for _, m in ipairs(kbacklog(msgs, due)) do
    local id, key, seq = m[1], m[2], m[3]
    redis.call('ZREM', delayed, id)
    if key then
      local s = kget(K, key)
      s[1] = s[1] - 1
      kback(K, s, id, seq, conc)
      kput(K, key, s, conc, 0)
    end
  end
  return #due
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

local function kstore(K, order, st, conc)
  local kstate, kturn, seq = K.kstate, K.kturn, K.seq
  local sets, dels, ready = {}, {}, {}
  for _, key in ipairs(order) do
    local s = st[key]
    local f, w = s[1], s[2]
    if f <= 0 and w <= 0 then
      dels[#dels + 1] = key
    else
      sets[#sets + 1] = key
      sets[#sets + 1] = kpack(s)
    end
    if w > 0 and f < conc then ready[#ready + 1] = key end
  end
  bulk('HSET', kstate, sets)
  bulk('HDEL', kstate, dels)
  local added = 0
  if #ready > 0 then
    local base = redis.call('INCRBY', seq, #ready) - #ready
    local z = {}
    for i, key in ipairs(ready) do
      z[#z + 1] = base + i
      z[#z + 1] = key
    end
    for i = 1, #z, 4000 do  -- NX: a key that has a turn keeps it
      added = added + redis.call('ZADD', kturn, 'NX', unpack(z, i, math.min(i + 3999, #z)))
    end
  end
  return added
end

-- The messages of one call go last in their keys at once: their records in one HSET, the
-- touched keys' states in one HMGET and back in one HSET (kload, kstore), every link in
-- one HSET. A key's new messages chain to each other in push order; the first links
-- after the key's tail (whose next is set: one HMGET for all the tails).
local function kplace(K, places, conc)
  local msgs, kwait = K.msgs, K.kwait
  local recs, order, by = {}, {}, {}
  for i = 1, #places, 5 do
    local id, key = places[i], places[i + 1]
    recs[#recs + 1] = id
    recs[#recs + 1] = places[i + 3] .. ',0,0,K' .. kprefix(key) .. places[i + 4] .. places[i + 2]
    local mine = by[key]
    if not mine then
      mine = {}
      by[key] = mine
      order[#order + 1] = key
    end
    mine[#mine + 1] = id
  end
  if #order == 0 then return end
  bulk('HSET', msgs, recs)
  local st = kload(K, order)
  local tails, after = {}, {}  -- the keys whose chain goes on: their tails, first new ids
  for _, key in ipairs(order) do
    local s = st[key]
    if s[2] > 0 and s[5] ~= '' then
      tails[#tails + 1] = s[5]
      after[#after + 1] = by[key][1]
    end
  end
  local links = {}
  if #tails > 0 then
    local old = bulk_read('HMGET', kwait, tails)
    for i, tail in ipairs(tails) do
      if old[i] then  -- a missing link stays missing
        local prev = lsplit(old[i])
        links[#links + 1] = tail
        links[#links + 1] = lpack(prev, after[i])
      end
    end
  end
  for _, key in ipairs(order) do
    local s, mine = st[key], by[key]
    local prev = ''
    if s[2] > 0 and s[5] ~= '' then
      prev = s[5]
      s[2] = s[2] + #mine
    else  -- the first to wait (a count without a chain, not written by dynoq: mended)
      s[2], s[4] = #mine, mine[1]
    end
    for m, id in ipairs(mine) do
      links[#links + 1] = id
      links[#links + 1] = lpack(prev, mine[m + 1] or '')
      prev = id
    end
    s[5] = prev
  end
  bulk('HSET', kwait, links)
  kstore(K, order, st, conc)
end

local function ktake(K, count, deadline, nonce, conc, out, now)
  local msgs, kwait, kturn, kfence, unack, dlv = K.msgs, K.kwait, K.kturn, K.kfence, K.unack, K.dlv
  local dead, why = K.dead, K.why
  local fences = redis.call('EXISTS', kfence) == 1  -- none until a first takeover
  local n, rounds, buried, alien = 0, 0, 0, false
  -- A round takes one head of each of the keys with the lowest turns; a key that may
  -- deliver more takes a new turn, behind the others (key_concurrency > 1, a key alone).
  while n < count and rounds < count do
    rounds = rounds + 1
    local top = redis.call('ZPOPMIN', kturn, count - n)
    if #top == 0 then break end
    local keys = {}
    for i = 1, #top, 2 do keys[#keys + 1] = top[i] end
    local st = kload(K, keys)
    local firsts, heads = {}, {}
    for _, key in ipairs(keys) do
      local s = st[key]
      if s[2] > 0 and s[4] ~= '' then
        firsts[#firsts + 1] = key
        heads[#heads + 1] = s[4]
      else
        s[2] = 0  -- a state that lost its messages (not written by dynoq): mend it
      end
    end
    local links = #heads > 0 and bulk_read('HMGET', kwait, heads) or {}
    local recs = #heads > 0 and bulk_read('HMGET', msgs, heads) or {}
    local ids, owners, got = {}, {}, {}
    for i, key in ipairs(firsts) do
      local s, link = st[key], links[i]
      if link and not dead and recs[i] and kparse(recs[i]) ~= key then
        alien = true  -- not its key's record: left for kpop to dead-letter
      elseif link then  -- unlink the head: its next is the new head (whose prev is not kept)
        local _, nxt = lsplit(link)
        ids[#ids + 1] = heads[i]
        owners[#owners + 1] = key
        got[#ids] = recs[i]
        s[4] = nxt
        s[2] = nxt == '' and 0 or math.max(s[2] - 1, 1)
      else
        s[2] = 0  -- its chain is broken (not by dynoq): mend the state, the key moves on
      end
    end
    if #ids > 0 then
      bulk('HDEL', kwait, ids)
      local states = bulk_read('HMGET', dlv, ids)
      local fs = fences and bulk_read('HMGET', kfence, owners) or {}
      local z, d = {}, {}
      for i, id in ipairs(ids) do
        local rec = got[i]
        if rec and kparse(rec) ~= owners[i] then
          redis.call('ZADD', dead, now, id)
          record_why(why, id, now, 'r', '')
          buried = buried + 1
        elseif rec then
          local a = attempts(states[i]) + 1
          z[#z + 1] = deadline
          z[#z + 1] = id
          d[#d + 1] = id
          local as = kn(a)  -- formatted once a call per count (see kn)
          d[#d + 1] = as .. '||' .. nonce .. '.' .. as
          local s = st[owners[i]]
          s[1], s[3] = s[1] + 1, id
          out[#out + 1] = id
          out[#out + 1] = rec
          out[#out + 1] = a
          out[#out + 1] = fs[i] and tonumber(fs[i]) or 1
          n = n + 1
        end
      end
      bulk('ZADD', unack, z)
      bulk('HSET', dlv, d)
    end
    kstore(K, keys, st, conc)
    if alien then break end
  end
  return n, buried
end

local function kadd(K, conc, ensure, window, now, items, from, out)
  local msgs, seq, done, kturn = K.msgs, K.seq, K.done, K.kturn
  local idle = redis.call('EXISTS', kturn) == 0  -- no key ready: waiters need the news
  local n = math.floor((#items - from + 1) / 3)
  local base = redis.call('INCRBY', seq, n) - n
  local enq = stamp(now)
  local seen, ids, at = {}, {}, {}  -- the first of each id counts
  for i = 1, n do
    local id = items[from + 3 * (i - 1)]
    out[i] = 0
    if not seen[id] then
      seen[id] = true
      ids[#ids + 1] = id
      at[#at + 1] = i
    end
  end
  if #ids == 0 then return 0, false, 0 end
  local old = bulk_read('HMGET', msgs, ids)
  local acked = ensure and window > 0 and bulk_read('ZMSCORE', done, ids) or {}
  local places, pushed, refused = {}, 0, 0
  local seqs = kseqs(base + 1)  -- the placed ones' seqs, in push order
  for m, id in ipairs(ids) do
    local add = true
    if old[m] then
      -- a plain push replaces it: the old copy leaves every state first (rare)
      if ensure then add = false else kdrop(K, id, old[m], conc) end
    elseif acked[m] and tonumber(acked[m]) + window > now then
      add = false
      refused = refused + 1
    end
    if add then
      local i = at[m]
      local j = from + 3 * (i - 1)
      places[#places + 1] = id
      places[#places + 1] = items[j + 1]
      places[#places + 1] = items[j + 2]
      places[#places + 1] = enq
      places[#places + 1] = seqs()
      out[i] = 1
      pushed = pushed + 1
    end
  end
  kplace(K, places, conc)
  return pushed, idle and pushed > 0, refused
end

local function kensure(k, conc, window, now, items, from, out)
  local K = {kwait = k[1], kturn = k[2], kstate = k[3], msgs = k[4], seq = k[7], done = k[8]}
  return kadd(K, conc, true, window, now, items, from, out or {})
end
