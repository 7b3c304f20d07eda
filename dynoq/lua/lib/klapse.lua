--[[ lib/klapse: lib/lapse.lua on a keyed shard (lib/keyed.lua): a due message that still
  waits in its key's chain leaves it for the dead letters; its key moves on.
  uses: lib/lapse.lua lib/keyed.lua lib/kstore.lua lib/klinks.lua lib/kdrop.lua lib/why.lua
  klapse(K, now, limit, conc) -> how many were dead-lettered, and whether more may remain
]]
local function klapse(K, now, limit, conc)
  local ids, more = due_lapses(K.expiry, now, limit)
  local n = 0
  for _, id in ipairs(ids) do
    local key = kkey(redis.call('HGET', K.msgs, id))
    if key then
      local s = kget(K, key)
      if kleave(K, s, id) then
        kput(K, key, s, conc, nil, true)
        redis.call('ZADD', K.dead, now, id)
        record_why(K.why, id, now, 'l', '')
        n = n + 1
      end
    end
  end
  lapsed(K.counts, n)
  return n, more
end
