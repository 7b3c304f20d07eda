--[[ tx-settle: commit or roll back a prepared message (its producer, or a checker whose
  claim is current), or, for a checker, put off an "unknown" answer. Atomic and final:
  a committed message is placed exactly as a push places a new one (lib/place.lua), its
  delay counted from now and, on an ordered shard, its place taken now.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq  KEYS[8] counts  KEYS[9] half  KEYS[10] txs  KEYS[11] decided  KEYS[12] why
  KEYS[13] epoch  KEYS[14] kwait  KEYS[15] kturn  KEYS[16] kstate (a keyed queue's: lib/keyed.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] "commit", "rollback" or "unknown" (checkers only)
  ARGV[4] the checker's claim token ("" = the producer, by id)
  ARGV[5] check interval ms (unknown: when to ask again)
  ARGV[6] max checks (unknown: after this many checks it is buried instead)
  ARGV[7] wake channel (PUBLISHed when the commit may wake a waiting pop)
  ARGV[8] key_concurrency of a keyed queue (ordered="key"), "" for any other: the commit
          then appends the message to its key (the record's key, written by tx-prepare)
  returns: 1 done now; 2 the same decision was taken before (producer only);
           0 the other decision was taken before, or the checker's claim is not current;
           5 no such prepared message (never prepared, or decided over a day ago);
           3 unknown noted, asked again later; 4 unknown, and buried (max checks spent);
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/promote.lua
    lib/place.lua lib/tx.lua
    lib/keyed.lua
  flags: allow-oom
]]
local interval, most = int(ARGV[5], 0, MAX_MS), int(ARGV[6], 0, math.huge)
local conc = int(ARGV[8], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 16 and #ARGV == 8 and interval and most and (conc or ARGV[8] == '')) then
  return BOUNDS
end
local refused = gone(KEYS[13], ARGV[1])
if refused then return refused end
local delayed, ready, unack, msgs, dlv, dead, seq, counts, half, txs, decided, why =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9],
  KEYS[10], KEYS[11], KEYS[12]
local k = {delayed = delayed, ready = ready, unack = unack, msgs = msgs, dead = dead,
           half = half, txs = txs, decided = decided, why = why, counts = counts}
local id, what, tok = ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
forget_decisions(decided, now)
local pending = redis.call('ZSCORE', half, id)
if not pending then
  local mine = what == 'commit' and 'c:' or 'r:'
  local other = what == 'commit' and 'r:' or 'c:'
  if redis.call('ZSCORE', decided, mine .. id) then return tok == '' and 2 or 0 end
  if redis.call('ZSCORE', decided, other .. id) then return 0 end
  return tok == '' and 5 or 0
end
local checks, held = tx_state(txs, id)
if tok ~= '' and (held ~= tok or tonumber(pending) <= now) then
  return 0  -- the claim ran out (another checker may hold it now): this one decides nothing
end
if what == 'unknown' then
  if checks >= most then
    bury_half(k, id, now, checks)
    return 4
  end
  redis.call('ZADD', half, now + interval, id)
  redis.call('HSET', txs, id, checks .. '|')
  return 3
end
redis.call('ZREM', half, id)
redis.call('HDEL', txs, id)
local rec = redis.call('HGET', msgs, id)
-- a plain push of the same id replaced the prepared message: that one stands
local replaced = rec and (conc and kreplaced(rec) or not conc and elsewhere(k, id))
if what == 'commit' then
  if not rec then
    -- removed while prepared: there is nothing to deliver, which is a rollback
    redis.call('ZADD', decided, now, 'r:' .. id)
    return 0
  end
  if not replaced and conc then
    local K = {msgs = msgs, kwait = KEYS[14], kturn = KEYS[15], kstate = KEYS[16], seq = seq,
               unack = unack, delayed = delayed, dead = dead, dlv = dlv, why = why}
    local idle = redis.call('EXISTS', K.kturn) == 0
    local key, body = kparse(rec), kbody(rec)
    kplace(K, {id, key, body, stamp(now), kseq(redis.call('INCR', seq))}, conc)
    if idle then redis.call('PUBLISH', ARGV[7], '1') end
    redis.call('HINCRBY', counts, 'pushed', 1)
  elseif not replaced then
    local _, delay = times(rec)
    redis.call('HSET', msgs, id, restamped(rec, now))
    promote(delayed, ready, msgs, dlv, seq, now, 5000)  -- what is due goes first
    local plan = placing(delayed, ready, now)
    place(plan, id, delay or 0, priority(rec), redis.call('INCR', seq))
    if placed(plan) then redis.call('PUBLISH', ARGV[7], '1') end
    redis.call('HINCRBY', counts, 'pushed', 1)
  end
  redis.call('HINCRBY', counts, 'committed', 1)
  redis.call('ZADD', decided, now, 'c:' .. id)
else
  if rec and not replaced then redis.call('HDEL', msgs, id) end
  redis.call('HINCRBY', counts, 'rolled_back', 1)
  redis.call('ZADD', decided, now, 'r:' .. id)
end
return 1
