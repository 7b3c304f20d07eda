--[[ lib/kdrop: a message of a keyed shard (lib/keyed.lua) removed from every state, its
  key's chain joined over it; its key moves on.
  uses: lib/keyed.lua lib/kstore.lua lib/klinks.lua
  kdrop(K, id, rec, conc) -> (rec: its record) removes it from msgs, dead, dlv, why and
    from kwait, unack or delayed; its key's state is written back (its turn taken away
    when it may no longer deliver)
  kleave(K, s, id) -> true when `id` waited in its key's chain (s: the key's state, from
    kget), now unlinked from it (the caller writes the state back)
]]
local function kleave(K, s, id)
  local kwait = K.kwait
  local link = redis.call('HGET', kwait, id)
  if not link then return false end
  local p, n = lsplit(link)
  redis.call('HDEL', kwait, id)
  local first = s[4] == id
  if first then p = '' end  -- the head's prev is not kept
  if first then s[4] = n else lset(kwait, p, 2, n) end
  if s[5] == id then s[5] = p else lset(kwait, n, 1, p) end
  s[2] = s[2] - 1
  if s[4] == '' then s[2] = 0 end  -- the chain ends here (mended if the count said more)
  return true
end

local function kdrop(K, id, rec, conc)
  local msgs, kwait, unack, delayed, dead, dlv, why =
    K.msgs, K.kwait, K.unack, K.delayed, K.dead, K.dlv, K.why
  local key = kkey(rec)
  redis.call('ZREM', dead, id)
  redis.call('HDEL', dlv, id)
  redis.call('HDEL', why, id)
  redis.call('HDEL', msgs, id)
  if not key then
    redis.call('ZREM', unack, id); redis.call('ZREM', delayed, id)
    return
  end
  local s = kget(K, key)
  if kleave(K, s, id) then
  elseif redis.call('ZREM', unack, id) + redis.call('ZREM', delayed, id) > 0 then
    s[1] = s[1] - 1
  else
    return
  end
  kput(K, key, s, conc, nil, true)
end
