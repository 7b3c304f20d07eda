--[[ lib/batch: where an ordered shard's first deliveries return to. Like a concurrent
  queue's, they have no delivery state (lib/delivery.lua), yet one given back (its
  visibility ran out, a retry in place, a lease takeover) must return to its place, the
  `ready` score it was popped with. An ordered shard has one batch in flight at a time
  (pop-13.lua), so the places of that batch are kept in one string, written by the pop
  that claimed it and replaced by the next: the value of the pin's `dlv` field
  (lib/pin.lua), so that `dlv` holds no more entries and an ack reads no states.
  A place is read only for a delivery in flight without a state, which the last pop of
  the shard made.
  keep_places(dlv, popped)  the ids and `ready` scores ZPOPMIN gave (one HSET; those that
                  have a state keep their place there too, and it is the one read)
  place_of(dlv, id) -> the saved place of the batch in flight, in whole numbers as a
                  delivery state holds it ('' when it has none); the string is read and
                  parsed once per script call
  Format: per message "<length of id>:<id><score>;" (an id may hold any character); at
  most one pop's batch, 1,000 ids of up to 512 characters.
  uses: lib/pin.lua lib/bounds.lua
]]
local function keep_places(dlv, popped)
  -- "<length>:" made once per length (ids of a queue are mostly one length): table.concat
  -- would format a number at every message.
  local parts, p, heads = {}, 0, {}
  for i = 1, #popped, 2 do
    local id = popped[i]
    local n = #id
    local h = heads[n]
    if not h then
      h = n .. ':'
      heads[n] = h
    end
    parts[p + 1], parts[p + 2], parts[p + 3], parts[p + 4] = h, id, popped[i + 1], ';'
    p = p + 4
  end
  redis.call('HSET', dlv, PIN, table.concat(parts))
end

local batch_places = nil
local function place_of(dlv, id)
  if not batch_places then
    batch_places = {}
    local s, at = redis.call('HGET', dlv, PIN) or '', 1
    -- at most one pop's batch: a longer string was not written by keep_places
    for _ = 1, MAX_BATCH do
      if at > #s then break end
      local colon = string.find(s, ':', at, true)
      if not colon then break end
      local len = tonumber(string.sub(s, at, colon - 1))
      if not len then break end
      local first = colon + len
      local semi = string.find(s, ';', first + 1, true)
      if not semi then break end
      batch_places[string.sub(s, colon + 1, first)] = string.sub(s, first + 1, semi - 1)
      at = semi + 1
    end
  end
  local score = batch_places[id]
  -- Kept as ZPOPMIN gave it, written out here (as a state saves it) on this rare path.
  return score and string.format('%d', tonumber(score)) or ''
end
