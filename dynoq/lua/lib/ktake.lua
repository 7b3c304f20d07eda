--[[ lib/ktake: a keyed shard's (lib/keyed.lua) deliveries: up to `count` keys' heads, keys
  round-robin, each by its weight (lib/kweight.lua; kpop, and kack's take for a hot key
  alone).
  uses: lib/bulk.lua lib/delivery.lua lib/why.lua lib/knum.lua lib/keyed.lua lib/kstore.lua
    lib/klinks.lua lib/pin.lua lib/kweight.lua lib/krate.lua
  ktake(K, count, due, nonce, conc, out, now, gap) -> appends id, record, attempts, fence
    of up to `count` keys' heads to `out` (due: their `unack` score, deadline(ms, nonce) of
    lib/delivery.lua); returns how many, and how many it dead-lettered. gap: the
    key_rate_limit's ms between two deliveries of a key (lib/krate.lua; nil: none). A
    first delivery writes no delivery state, as on a concurrent queue (its token is
    `due`); any other's token is "<nonce>.<attempts>", in its state. A head whose
    record does not name its key (not written by dynoq: no script could find its key
    again to free it) is dead-lettered (why: "r") when K has dead and why (kpop's header
    names them), else left waiting and the take ends (kack's names no dead)
]]
local function ktake(K, count, due, nonce, conc, out, now, gap)
  local msgs, kwait, kturn, kfence, unack, dlv = K.msgs, K.kwait, K.kturn, K.kfence, K.unack, K.dlv
  local dead, why = K.dead, K.why
  local fences = redis.call('EXISTS', kfence) == 1  -- none until a first takeover
  local n, rounds, buried, alien, rested = 0, 0, 0, false, 0
  local weighted = wany(K)  -- once a take: no round changes the shard's weights
  -- A round takes one head of each of the keys with the lowest turns; a key that may
  -- deliver more takes a new turn, behind the others (key_concurrency > 1, a key alone).
  -- (At most REST_LIMIT keys rest a call: a take of 1,000 from a shard of a million
  -- keys all served too recently would move them all to krest in one call.)
  while n < count and rounds < count and rested < REST_LIMIT do
    rounds = rounds + 1
    local top = redis.call('ZPOPMIN', kturn, count - n)
    if #top == 0 then break end
    local keys, turns = {}, {}
    for i = 1, #top, 2 do
      keys[#keys + 1] = top[i]
      turns[top[i]] = top[i + 1]
    end
    local times
    if gap then  -- the others rest
      local popped = #keys
      keys, times = rhold(K, keys, turns, now)
      rested = rested + popped - #keys
    end
    local st = kload(K, keys)
    local ws = weighted and wload(K, keys) or nil
    if ws then
      -- A weighted key served again before the keys behind it: they go back unserved,
      -- at their turns, and the next round starts with it (as pops of one would go).
      local cut, back = wcut(ws, keys, turns, st, conc), {}
      for i = #keys, cut + 1, -1 do
        back[#back + 1] = turns[keys[i]]
        back[#back + 1] = keys[i]
        keys[i] = nil
      end
      bulk('ZADD', kturn, back)
    end
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
      if link and not dead and recs[i] and kkey(recs[i]) ~= key then
        alien = true  -- not its key's record: left for kpop to dead-letter
      elseif link then  -- unlink the head: its next is the new head (whose prev is not kept)
        local nxt = lnext(link)
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
      -- No states but the pin: nothing to read (first deliveries of a drained shard).
      local states = held(dlv) and bulk_read('HMGET', dlv, ids) or {}
      local fs = fences and bulk_read('HMGET', kfence, owners) or {}
      local z, d, fresh = {}, {}, {}
      for i, id in ipairs(ids) do
        local rec = got[i]
        if rec and kkey(rec) ~= owners[i] then
          redis.call('ZADD', dead, now, id)
          record_why(why, id, now, 'r', '')
          buried = buried + 1
        elseif rec then
          local a = attempts(states[i]) + 1
          z[#z + 1] = due
          z[#z + 1] = id
          if a > 1 then
            d[#d + 1] = id
            local as = kn(a)  -- formatted once a call per count (see kn)
            d[#d + 1] = as .. '||' .. nonce .. '.' .. as
          elseif states[i] then
            fresh[#fresh + 1] = id  -- given back unhandled ("0|..."): a first one again
          end
          local s = st[owners[i]]
          s[1], s[3] = s[1] + 1, id
          if ws then wserve(K, ws, owners[i], turns[owners[i]]) end
          out[#out + 1] = id
          out[#out + 1] = rec
          out[#out + 1] = a
          out[#out + 1] = fs[i] and tonumber(fs[i]) or 1
          n = n + 1
        end
      end
      bulk('ZADD', unack, z)
      bulk('HSET', dlv, d)
      bulk('HDEL', dlv, fresh)
      if gap then rserved(K, owners, times, now, gap) end
    end
    kstore(K, keys, st, conc, nil, wkeep(ws, keys))
    if alien then break end
  end
  return n, buried
end
