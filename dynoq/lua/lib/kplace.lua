--[[ lib/kplace: the one step that places new messages into a keyed shard (lib/keyed.lua):
  push, replay, a transaction's commit.
  uses: lib/bulk.lua lib/keyed.lua lib/kstore.lua lib/klinks.lua
  kplace(K, places, conc) -> writes messages' records and appends each to its key, in
    order; places: a flat list of id, key, body (without the key), enq, seq per message,
    ids in no state of the shard (new ones, or dead-lettered ones a replay took out)
]]
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
  local holding = {}  -- keys that waited: a turn held, or no free slot (lib/kstore.lua)
  for _, key in ipairs(order) do
    local s, mine = st[key], by[key]
    local prev = ''
    if s[2] > 0 and s[5] ~= '' then
      prev = s[5]
      holding[key] = true
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
  kstore(K, order, st, conc, holding)
end
