--[[ lib/transaction: a prepared (half) message's state, shared by the transaction scripts.
  A prepared message's record is in `msgs` and its id in `half` (scored by when it is next
  checked, or when its check claim ends) and in no other state set, so pops, peeks and
  sizes never see it. `txs` holds "<checks so far>|<claim token>" per prepared id;
  `decided` remembers each decision ("c:<id>" committed, "r:<id>" rolled back) for KEEP_MS,
  so that a late commit or rollback of the same handle is answered, not redone.
  tx_state(txs, id)        -> checks (number), claim token (string, '' when unclaimed)
  elsewhere(k, id)         -> true when the id also sits in ready, delayed, unack or dead
                              (a plain push replaced the prepared message: that one stands)
  forget_decisions(decided, now) drops decisions older than KEEP_MS (at most 100 a call)
  deciding(k, id, what, tok, now) -> nil, checks so far when `tok` may decide `id` now
    (what: "commit", "rollback" or "unknown"; tok: a checker's claim token, '' for the
    producer): it is prepared, and the claim is current; else the reply, that decision
    taken before (2 for the producer, else 0), the other one (0), no such prepared
    message (5 for the producer, else 0), or a claim run out (0). Forgets old decisions
    first
  bury_half(k, id, now, checks): rolled back, kept with the dead letters, reason "t"
    (transaction unresolved) in `why`
  k: the shard's keys by name (ready, delayed, unack, dead, half, txs, decided, why, counts)
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

local function deciding(k, id, what, tok, now)
  forget_decisions(k.decided, now)
  local pending = redis.call('ZSCORE', k.half, id)
  if not pending then
    local mine = what == 'commit' and 'c:' or 'r:'
    local other = what == 'commit' and 'r:' or 'c:'
    if redis.call('ZSCORE', k.decided, mine .. id) then return tok == '' and 2 or 0 end
    if redis.call('ZSCORE', k.decided, other .. id) then return 0 end
    return tok == '' and 5 or 0
  end
  local checks, held = tx_state(k.txs, id)
  if tok ~= '' and (held ~= tok or tonumber(pending) <= now) then
    return 0  -- the claim ran out (another checker may hold it now): this one decides nothing
  end
  return nil, checks
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
