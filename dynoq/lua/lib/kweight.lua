--[[ lib/kweight: fairness weights between the keys of a keyed shard (q.set_weight, DESIGN
  §3.9; lua/weight-2.lua writes them): deficit round-robin on lib/keyed.lua's turns. A
  key of weight w keeps the turn it was served at for w deliveries in a row, then goes
  behind every key waiting, as a key of weight 1 (no entry) always does: while keys wait,
  one of weight w gets w turns for each turn of a weight-1 key. A key that comes back
  by any other way (a push, a retry, a give-back) gets a turn from the shard's `seq` or
  turn 0, unlike the one it kept: its next delivery starts a new round.
  Kept in the shard's `control` hash, configuration like the pause (a clear keeps it):
  `w:<key>` -> "<weight>|<deliveries this round>|<the round's turn>" and `weighted` -> how
  many keys have one (absent when none: the one read the hot paths make).
  uses: lib/bulk.lua
  wany(K) -> true when the shard has a weighted key (one HGET: a caller asks it once)
  wload(K, keys) -> key -> {weight, used, turn} of the weighted ones among `keys` (nil
    for no keys); call it only when wany(K)
  wserve(K, ws, key, turn) -> notes a delivery of `key` served at `turn` (the score its
    ZPOPMIN gave, as text), written back
  wcut(ws, keys, turns, st, conc) -> how many of `keys` (popped in turn order, turns[key]
    their scores, st[key] their states: lib/kstore.lua) one round of a take may serve: up
    to the first weighted key whose round goes on after this delivery and that may then
    deliver again (more waiting, a free slot of key_concurrency: it is next in line again,
    before the keys popped after it). A key that may not (the default key_concurrency of
    1) is out of line until an ack, as with pops of one: no cut.
  wkeep(ws, keys) -> key -> the turn each weighted key of `keys` keeps when it may
    deliver again (its round is not over), or nil when none does
]]
local function wany(K)
  return redis.call('HGET', K.control, 'weighted') ~= false
end

local function wload(K, keys)
  if #keys == 0 then return nil end
  local fields = {}
  for i, key in ipairs(keys) do fields[i] = 'w:' .. key end
  local raw = bulk_read('HMGET', K.control, fields)
  local ws = {}
  for i, key in ipairs(keys) do
    local w, used, turn = string.match(raw[i] or '', '^(%d+)|(%d+)|(.*)$')
    if w then ws[key] = {tonumber(w), tonumber(used), turn} end
  end
  return ws
end

local function wserve(K, ws, key, turn)
  local w = ws[key]
  if not w then return end
  if w[3] == turn then w[2] = w[2] + 1 else w[2], w[3] = 1, turn end
  redis.call('HSET', K.control, 'w:' .. key, w[1] .. '|' .. w[2] .. '|' .. w[3])
end

local function wcut(ws, keys, turns, st, conc)
  for i, key in ipairs(keys) do
    local w = ws[key]
    if w and (w[3] == turns[key] and w[2] + 1 or 1) < w[1] then
      local s = st[key]
      if s[1] + 1 < conc and s[2] > 1 then return i end
    end
  end
  return #keys
end

local function wkeep(ws, keys)
  if not ws then return nil end
  local keep
  for _, key in ipairs(keys) do
    local w = ws[key]
    if w and w[2] < w[1] and w[3] ~= '' then
      keep = keep or {}
      keep[key] = w[3]
    end
  end
  return keep
end
