--[[ transaction-publish: commit a topic's prepared message: out of the topic's staging keys and
  into every subscribed group queue whose tag filter matches it, atomically (each group
  queue places it as a publish does: lib/publish.lua, push-if-absent). Its producer, or a
  checker whose claim is current (rollback and "unknown" go through transaction-settle-16.lua on
  the staging keys).
  KEYS[1] subs (the topic shard's subscriptions)  KEYS[2] epoch (the topic's)
  KEYS[3] msgs  KEYS[4] half  KEYS[5] txs  KEYS[6] decided  KEYS[7] counts (the staging
  keys, TopicKeys.staging())
  KEYS[8] delayed|kwait  KEYS[9] ready|kturn  KEYS[10] unack|kstate  KEYS[11] msgs
  KEYS[12] dlv  KEYS[13] dead  KEYS[14] seq  KEYS[15] done  KEYS[16] counts
  KEYS[17] expiry (lib/lapse.lua)
  KEYS[8..] repeated: one group of ten per target queue (a keyed topic's group queues
  pass kwait, kturn, kstate where the others pass delayed, ready, unack)
  ARGV[1] the caller's epoch of the topic ("" = not checked)
  ARGV[2] the subscriptions' version the caller built its KEYS from
  ARGV[3] id  ARGV[4] the checker's claim token ("" = the producer)
  ARGV[5] the message's tag ("" = none)  ARGV[6] dedupe window ms
  ARGV[7] number of targets T  ARGV[8] key_concurrency of a keyed topic (ordered="key"),
  "" for any other: the message (a keyed prepared record, transaction-prepare) then goes last in
  its key in every matching group (lib/kadd.lua)
  ARGV[9 .. 8+2T] per target: its tag filter and wake channel
  returns: as transaction-settle-16.lua's commit (1 done, 2 committed before, 0 rolled back before
           or a stale claim, 5 no such prepared message), GONE, or STALE when the
           subscriptions changed since the caller read them (it reads them and retries)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/push.lua lib/transaction.lua
        lib/keyed.lua lib/publish.lua
  flags: allow-oom
]]
local window, targets = int(ARGV[6], 0, MAX_MS), int(ARGV[7], 0, MAX_TARGETS)
local conc = int(ARGV[8], 1, MAX_KEY_CONCURRENCY)
if not (window and targets and (conc or ARGV[8] == '') and #KEYS == 7 + 10 * targets
        and #ARGV == 8 + 2 * targets and #ARGV[5] <= MAX_TAG_BYTES) then
  return BOUNDS
end
for t = 1, targets do
  if #ARGV[7 + 2 * t] > MAX_FILTER_BYTES then return BOUNDS end
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if redis.call('HGET', K.subs, '~v') ~= ARGV[2] then return STALE end
local id, tok, tag = ARGV[3], ARGV[4], ARGV[5]
local now = now_ms()
local answer = deciding(K, id, 'commit', tok, now)
if answer then return answer end
local rec = redis.call('HGET', K.msgs, id)
redis.call('ZREM', K.half, id)
redis.call('HDEL', K.txs, id)
if not rec then
  redis.call('ZADD', K.decided, now, 'r:' .. id)
  return 0
end
redis.call('HDEL', K.msgs, id)
local items
if conc then
  items = {id, kkey(rec), kbody(rec)}
else
  local _, delay = times(rec)
  items = {id, delay or 0, priority(rec), string.match(rec, '^%w+,%d+,%d+,(.*)$')}
end
local promoting = promote_share(targets)
for t = 1, targets do
  local filter, channel = ARGV[7 + 2 * t], ARGV[8 + 2 * t]
  if filter == '' or (tag ~= '' and string.find(filter, '|' .. tag .. '|', 1, true)) then
    publish_into(group_keys(t), conc, window, now, items, channel, promoting)
  end
end
redis.call('HINCRBY', K.counts, 'committed', 1)
redis.call('ZADD', K.decided, now, 'c:' .. id)
return 1
