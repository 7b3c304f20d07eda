--[[ transaction-settle: commit or roll back a prepared message (its producer, or a checker whose
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
          then appends the message to its key (the record's key, written by transaction-prepare)
  returns: 1 done now; 2 the same decision was taken before (producer only);
           0 the other decision was taken before, or the checker's claim is not current;
           5 no such prepared message (never prepared, or decided over a day ago);
           3 unknown noted, asked again later; 4 unknown, and buried (max checks spent);
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/promote.lua
    lib/place.lua lib/transaction.lua lib/knum.lua lib/keyed.lua lib/kplace.lua
  flags: allow-oom
]]
local interval, most = int(ARGV[5], 0, MAX_MS), int(ARGV[6], 0, math.huge)
local conc = int(ARGV[8], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 16 and #ARGV == 8 and interval and most and (conc or ARGV[8] == '')) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id, what, tok = ARGV[2], ARGV[3], ARGV[4]
local now = now_ms()
local answer, checks = deciding(K, id, what, tok, now)
if answer then return answer end
if what == 'unknown' then
  if checks >= most then
    bury_half(K, id, now, checks)
    return 4
  end
  redis.call('ZADD', K.half, now + interval, id)
  redis.call('HSET', K.txs, id, checks .. '|')
  return 3
end
redis.call('ZREM', K.half, id)
redis.call('HDEL', K.txs, id)
local rec = redis.call('HGET', K.msgs, id)
-- a plain push of the same id replaced the prepared message: that one stands
local replaced = rec and (conc and kreplaced(rec) or not conc and elsewhere(K, id))
if what == 'commit' then
  if not rec then
    -- removed while prepared: there is nothing to deliver, which is a rollback
    redis.call('ZADD', K.decided, now, 'r:' .. id)
    return 0
  end
  if not replaced and conc then
    local idle = redis.call('EXISTS', K.kturn) == 0
    local key, body = kkey(rec), kbody(rec)
    kplace(K, {id, key, body, stamp(now), kseq(redis.call('INCR', K.seq))}, conc)
    if idle then redis.call('PUBLISH', ARGV[7], '1') end
    redis.call('HINCRBY', K.counts, 'pushed', 1)
  elseif not replaced then
    local _, delay = times(rec)
    redis.call('HSET', K.msgs, id, restamped(rec, now))
    promote(K.delayed, K.ready, K.msgs, K.dlv, K.seq, now, 5000)  -- what is due goes first
    local plan = placing(K.delayed, K.ready, now)
    place(plan, id, delay or 0, priority(rec), redis.call('INCR', K.seq))
    if placed(plan) then redis.call('PUBLISH', ARGV[7], '1') end
    redis.call('HINCRBY', K.counts, 'pushed', 1)
  end
  redis.call('HINCRBY', K.counts, 'committed', 1)
  redis.call('ZADD', K.decided, now, 'c:' .. id)
else
  if rec and not replaced then redis.call('HDEL', K.msgs, id) end
  redis.call('HINCRBY', K.counts, 'rolled_back', 1)
  redis.call('ZADD', K.decided, now, 'r:' .. id)
end
return 1
