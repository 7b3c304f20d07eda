--[[ lib/kdebounce: held debounced messages (lib/debounce.lua) placed into a keyed shard.
  uses: lib/debounce.lua lib/keyed.lua lib/kdrop.lua lib/kplace.lua lib/knum.lua
  kdplace(K, now, limit, conc) -> how many held copies due were placed, each last in its
    key as a push then would place it (a dead letter of its id replaced)
]]
local function kdplace(K, now, limit, conc)
  local due = ddue(K, now, limit)
  if #due == 0 then return 0 end
  local base = redis.call('INCRBY', K.seq, #due) - #due
  local places, seqs = {}, kseqs(base + 1)
  for _, d in ipairs(due) do
    local id, rec = d[1], d[2]
    if d[3] then kdrop(K, id, d[3], conc) end
    local key = kkey(rec)
    if key then  -- held records are written by khold: a record without its key is not
      places[#places + 1] = id
      places[#places + 1] = key
      places[#places + 1] = kbody(rec)
      places[#places + 1] = string.match(rec, '^(%w+),')
      places[#places + 1] = seqs()
    end
  end
  kplace(K, places, conc)
  return #places / 5
end
