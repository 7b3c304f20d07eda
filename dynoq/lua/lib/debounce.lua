--[[ lib/debounce: debounced messages of ordered and keyed shards, held until they are due
  (DESIGN §3.9; a concurrent queue's debounce is a plain push with a delay). An ordered
  shard (or key) is blocked while a retry of it waits in `delayed`, so a held message
  waits there after every retry: scored DEBOUNCED + its due time (ms), under its own
  name, DMARK .. id (byte 255 begins no UTF-8 text: it is no message id), with its
  record in `msgs` under that name. So a held copy is apart from the message of its id
  that may be in the shard: it waits behind a delivery of its id that runs or retries,
  and takes its place in the shard's (or key's) order when a pop finds it due, as a
  push then would. While a copy of its id is still in the shard (waiting, in flight, a
  retry, prepared; not dead) it waits DNAP ms more: a pop looks again then.
  uses: lib/bulk.lua lib/pin.lua lib/record.lua
  DEBOUNCED  2^50 ms (35,000 years): every held score is above every due time
  RETRIES    '(' .. DEBOUNCED: the end of a range over the rest of `delayed`
  dname(id) -> the held copy's member in `delayed` and field in `msgs`
  first_due(delayed) -> the first due time (ms) of `delayed`, a retry's, a delayed
    message's or a held one's, or nil
  dhold(K, id, body, now, wait) -> holds the copy of `id` pushed at `now` (its record:
    lib/record.lua's header, due `wait` ms later, then `body`), replacing a held copy of
    `id`, and counts it pushed; true when it is due before everything else in `delayed`
    (a waiter may need the news)
  ddrop(K, id) -> 1 when a held copy of `id` was dropped, else 0
  dcancel(K, id) -> ddrop's, the copy dropped counted cancelled (it waited)
  ddue(K, now, limit) -> the held copies due by `now` (at most `limit`) whose id has no
    copy in the shard, as {id, record, its dead letter's record or nil}, taken out of
    `delayed` and `msgs` (the others wait DNAP ms more): for dplace and kdplace
  dplace(K, now, limit) -> how many held copies due were placed last in an ordered
    shard's `ready` (a dead letter of their id replaced); keyed shards: lib/kdebounce.lua
]]
local DEBOUNCED = 1125899906842624
local DMARK = '\255'
local DNAP = 200
local RETRIES = '(1125899906842624'

local function dname(id)
  return DMARK .. id
end

-- Written as an integer: scores this size are past the 14 digits a number argument of
-- redis.call may be formatted with.
local function dscore(due)
  return string.format('%d', DEBOUNCED + due)
end

local function first_due(delayed)
  local first = head(delayed)
  local due = tonumber(first[2])
  if due and due >= DEBOUNCED then return due - DEBOUNCED end
  -- a retry (or delayed message) is first: a held copy may still be due before it
  local after = redis.call('ZRANGEBYSCORE', delayed, dscore(0), BELOW_PIN, 'WITHSCORES',
                          'LIMIT', 0, 1)
  if after[2] then
    local h = tonumber(after[2]) - DEBOUNCED
    if not due or h < due then return h end
  end
  return due
end

local function dhold(K, id, body, now, wait)
  local first, due = first_due(K.delayed), now + wait
  local name = dname(id)
  local rec = stamp(now) .. ',' .. string.format('%d', wait) .. ',0,' .. body
  redis.call('HSET', K.msgs, name, rec)
  redis.call('ZADD', K.delayed, dscore(due), name)
  redis.call('HINCRBY', K.counts, 'pushed', 1)
  return not first or due < first
end

local function ddrop(K, id)
  local name = dname(id)
  redis.call('HDEL', K.msgs, name)
  return redis.call('ZREM', K.delayed, name)
end

local function dcancel(K, id)
  local held = ddrop(K, id)
  if held > 0 then redis.call('HINCRBY', K.counts, 'cancelled', 1) end
  return held
end

local function ddue(K, now, limit)
  local names = redis.call('ZRANGEBYSCORE', K.delayed, dscore(0), dscore(now),
                           'LIMIT', 0, limit)
  if #names == 0 then return {} end
  local ids = {}
  for i, name in ipairs(names) do ids[i] = string.sub(name, 2) end
  local recs = bulk_read('HMGET', K.msgs, names)
  local there = bulk_read('HMGET', K.msgs, ids)
  local later, done, out = {}, {}, {}
  for i, id in ipairs(ids) do
    local old = there[i]
    if old and not redis.call('ZSCORE', K.dead, id) then
      -- a copy of its id is still in the shard: after it
      later[#later + 1] = dscore(now + DNAP)
      later[#later + 1] = names[i]
    else
      done[#done + 1] = names[i]
      if recs[i] then out[#out + 1] = {id, recs[i], old} end
    end
  end
  if #later > 0 then bulk('ZADD', K.delayed, later) end
  if #done > 0 then
    bulk('ZREM', K.delayed, done)
    bulk('HDEL', K.msgs, done)
  end
  return out
end

local function dplace(K, now, limit)
  local due = ddue(K, now, limit)
  if #due == 0 then return 0 end
  local base = redis.call('INCRBY', K.seq, #due) - #due
  local fields, scores = {}, {}
  for n, d in ipairs(due) do
    local id, rec = d[1], d[2]
    if d[3] then  -- a dead letter of its id: replaced, as a push replaces it
      redis.call('ZREM', K.dead, id)
      redis.call('HDEL', K.dlv, id)
      redis.call('HDEL', K.why, id)
    end
    fields[#fields + 1] = id
    fields[#fields + 1] = rec
    scores[#scores + 1] = priority(rec) * PRIO + base + n
    scores[#scores + 1] = id
  end
  bulk('HSET', K.msgs, fields)
  bulk('ZADD', K.ready, scores)
  return #due
end
