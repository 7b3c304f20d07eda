--[[ tx-publish: commit a topic's prepared message: out of the topic's staging keys and
  into every subscribed group queue whose tag filter matches it, atomically (each group
  queue places it as a publish does: lib/push.lua, push-if-absent). Its producer, or a
  checker whose claim is current (rollback and "unknown" go through tx-settle-16.lua on
  the staging keys).
  KEYS[1] subs (the topic shard's subscriptions)  KEYS[2] epoch (the topic's)
  KEYS[3] msgs  KEYS[4] half  KEYS[5] txs  KEYS[6] decided  KEYS[7] counts (the staging
  keys, TopicKeys.staging())
  KEYS[8] delayed  KEYS[9] ready  KEYS[10] unack  KEYS[11] msgs  KEYS[12] dlv
  KEYS[13] dead  KEYS[14] seq  KEYS[15] done  KEYS[16] counts  (repeated: one group of
  nine per target queue; on a keyed topic the first three of each group are kwait,
  kturn, kstate)
  ARGV[1] the caller's epoch of the topic ("" = not checked)
  ARGV[2] the subscriptions' version the caller built its KEYS from
  ARGV[3] id  ARGV[4] the checker's claim token ("" = the producer)
  ARGV[5] the message's tag ("" = none)  ARGV[6] dedupe window ms
  ARGV[7] number of targets T  ARGV[8] key_concurrency of a keyed topic (ordered="key"),
  "" for any other: the message (a keyed prepared record, tx-prepare) then goes last in
  its key in every matching group (lib/keyed.lua)
  ARGV[9 .. 8+2T] per target: its tag filter and wake channel
  returns: as tx-settle-16.lua's commit (1 done, 2 committed before, 0 rolled back before
           or a stale claim, 5 no such prepared message), GONE, or STALE when the
           subscriptions changed since the caller read them (it reads them and retries)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua lib/tx.lua lib/keyed.lua
  flags: allow-oom
]]
local window, targets = int(ARGV[6], 0, MAX_MS), int(ARGV[7], 0, MAX_TARGETS)
local conc = int(ARGV[8], 1, MAX_KEY_CONCURRENCY)
if not (window and targets and (conc or ARGV[8] == '') and #KEYS == 7 + 9 * targets
        and #ARGV == 8 + 2 * targets and #ARGV[5] <= MAX_TAG_BYTES) then
  return BOUNDS
end
for t = 1, targets do
  if #ARGV[7 + 2 * t] > MAX_FILTER_BYTES then return BOUNDS end
end
local refused = gone(KEYS[2], ARGV[1])
if refused then return refused end
if redis.call('HGET', KEYS[1], '~v') ~= ARGV[2] then return STALE end
local msgs, half, txs, decided, counts = KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, tok, tag = ARGV[3], ARGV[4], ARGV[5]
local now = now_ms()
forget_decisions(decided, now)
local pending = redis.call('ZSCORE', half, id)
if not pending then
  if redis.call('ZSCORE', decided, 'c:' .. id) then return tok == '' and 2 or 0 end
  if redis.call('ZSCORE', decided, 'r:' .. id) then return 0 end
  return tok == '' and 5 or 0
end
local _, held = tx_state(txs, id)
if tok ~= '' and (held ~= tok or tonumber(pending) <= now) then return 0 end
local rec = redis.call('HGET', msgs, id)
redis.call('ZREM', half, id)
redis.call('HDEL', txs, id)
if not rec then
  redis.call('ZADD', decided, now, 'r:' .. id)
  return 0
end
redis.call('HDEL', msgs, id)
local items
if conc then
  items = {id, kparse(rec), kbody(rec)}
else
  local _, delay = times(rec)
  items = {id, delay or 0, priority(rec), string.match(rec, '^%w+,%d+,%d+,(.*)$')}
end
for t = 1, targets do
  local filter, channel = ARGV[7 + 2 * t], ARGV[8 + 2 * t]
  if filter == '' or (tag ~= '' and string.find(filter, '|' .. tag .. '|', 1, true)) then
    local k = {}
    for i = 1, 9 do k[i] = KEYS[7 + 9 * (t - 1) + i] end
    if conc then
      local pushed, wake = kensure(k, conc, window, now, items, 1)
      local counts = k[9]  -- the group queue's (named so: _core/grants.py reads the kind)
      if pushed > 0 then redis.call('HINCRBY', counts, 'pushed', pushed) end
      if wake then redis.call('PUBLISH', channel, '1') end
    else
      local _, _, wake = push_into(k, true, window, now, items, 1, nil, promote_share(targets))
      if wake then redis.call('PUBLISH', channel, '1') end
    end
  end
end
redis.call('HINCRBY', counts, 'committed', 1)
redis.call('ZADD', decided, now, 'c:' .. id)
return 1
