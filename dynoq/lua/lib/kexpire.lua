--[[ lib/kexpire: what a keyed shard (lib/keyed.lua) gives back, bounded: by a pop (kpop)
  and by the sweeper's step (krequeue).
  uses: lib/bulk.lua lib/delivery.lua lib/why.lua lib/keyed.lua lib/kstore.lua lib/klinks.lua
        lib/control.lua
  kexpire(K, now, limit, max_retries, conc) -> given back, dead-lettered, looked at:
    deliveries whose visibility ran out go back at the head of their key (one asked to
    stop ends cancelled, lib/control.lua, and its key moves on), whose fence
    (kfence) rises: whoever takes it next takes the key over; past max_retries they are
    dead-lettered (why: "x"). Both are counted in `counts`, as lib/expire.lua counts them
  kpromote(K, now, limit, conc) -> how many retries that fell due went back at the head
    of their key
]]
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
  local kfence, unack, dlv, dead, why = K.kfence, K.unack, K.dlv, K.dead, K.why
  local items = redis.call('ZRANGEBYSCORE', unack, '-inf', now, 'LIMIT', 0, limit)
  local back, buried = 0, 0
  local steered = #items > 0 and redis.call('EXISTS', K.control) == 1
  for _, m in ipairs(kbacklog(K.msgs, items)) do
    local id, key, seq = m[1], m[2], m[3]
    redis.call('ZREM', unack, id)
    if steered and key and asked(K.control, id) then
      cancelled(K.msgs, dlv, why, K.counts, K.control, id)
      kfree(K, key, conc, 0)
    elseif key then
      if steered then redis.call('HDEL', K.control, 'p:' .. id) end
      local d = redis.call('HGET', dlv, id)
      -- A first delivery has no state (lib/ktake.lua): it gets one, so that the next
      -- delivery counts it and its token (its unack score) no longer matches.
      if not d then redis.call('HSET', dlv, id, '1||') end
      if in_flight(d) > max_retries then
        redis.call('ZADD', dead, now, id)
        record_why(why, id, now, 'x', '')
        kfree(K, key, conc, 0)
        buried = buried + 1
      else
        kback(K, key, id, seq, conc)
        if redis.call('HSETNX', kfence, key, 2) == 0 then
          redis.call('HINCRBY', kfence, key, 1)
        end
        back = back + 1
      end
    end
  end
  if back > 0 then redis.call('HINCRBY', K.counts, 'expired', back) end
  if buried > 0 then redis.call('HINCRBY', K.counts, 'dead', buried) end
  return back, buried, #items
end

local function kpromote(K, now, limit, conc)
  local delayed = K.delayed
  local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
  for _, m in ipairs(kbacklog(K.msgs, due)) do
    redis.call('ZREM', delayed, m[1])
    if m[2] then kback(K, m[2], m[1], m[3], conc) end
  end
  return #due
end
