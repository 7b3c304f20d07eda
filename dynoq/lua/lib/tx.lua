--[[ lib/tx: a prepared (half) message's state, shared by the transaction scripts.
  A prepared message's record is in `msgs` and its id in `half` (scored by when it is next
  checked, or when its check claim ends) and in no other state set, so pops, peeks and
  sizes never see it. `txs` holds "<checks so far>|<claim token>" per prepared id;
  `decided` remembers each decision ("c:<id>" committed, "r:<id>" rolled back) for KEEP_MS,
  so that a late commit or rollback of the same handle is answered, not redone.
  tx_state(txs, id)        -> checks (number), claim token (string, '' when unclaimed)
  elsewhere(k, id)         -> true when the id also sits in ready, delayed, unack or dead
                              (a plain push replaced the prepared message: that one stands)
  forget_decisions(decided, now) drops decisions older than KEEP_MS (at most 100 a call)
  bury_half(k, id, now, checks): rolled back, kept with the dead letters, reason "t"
    (transaction unresolved) in `why`
  k: {delayed, ready, unack, msgs, dlv, dead, seq, counts, half, txs, decided, why}
]]
local KEEP_MS = 86400000

local function tx_state(txs, id)
  local s = redis.call('HGET', txs, id)
  if not s then return 0, '' end
  local n, tok = string.match(s, '^(%d+)|(.*)$')
  return tonumber(n) or 0, tok or ''
end

local function elsewhere(k, id)
  return redis.call('ZSCORE', k.ready, id) or redis.call('ZSCORE', k.delayed, id)
    or redis.call('ZSCORE', k.unack, id) or redis.call('ZSCORE', k.dead, id)
end

local function forget_decisions(decided, now)
  local old = redis.call('ZRANGEBYSCORE', decided, '-inf', now - KEEP_MS, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', decided, unpack(old)) end
end

local function bury_half(k, id, now, checks)
  local half, txs, dead, why, decided, counts = k.half, k.txs, k.dead, k.why, k.decided, k.counts
  redis.call('ZREM', half, id)
  redis.call('HDEL', txs, id)
  redis.call('ZADD', dead, now, id)
  redis.call('HSET', why, id, now .. ',' .. now .. ',t,' .. checks)
  redis.call('ZADD', decided, now, 'r:' .. id)
  redis.call('HINCRBY', counts, 'rolled_back', 1)
  redis.call('HINCRBY', counts, 'dead', 1)
end
