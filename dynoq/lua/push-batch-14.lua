--[[ push-batch: push-if-absent for a Spark write to one shard, counted; as part of a
  streaming micro-batch (query, batch id) it also remembers every id the batch handled,
  and skips a batch the query already committed, so a replayed or half-written batch
  pushes nothing twice even after consumers acked what it wrote the first time. As one
  attempt of a Spark task it remembers the ids it pushed, so a retry of the task counts
  what an earlier attempt pushed as pushed (not as duplicates) and pushes none of it again.
  KEYS[1] delayed|kwait  KEYS[2] ready|kturn  KEYS[3] unack|kstate  KEYS[4] msgs  KEYS[5] dlv
  KEYS[6] dead  KEYS[7] seq  KEYS[8] done  KEYS[9] counts
  (a keyed queue, ordered="key", passes its kwait, kturn and kstate first)
  KEYS[10] commit  hash of the query on this shard: committed = highest committed batch
                   id, batch = the uncommitted batch `wrote` belongs to
  KEYS[11] wrote   set of the ids the uncommitted batch handled (pushed, found, refused)
  KEYS[12] epoch   the queue's epoch (lib/refusal.lua gone())
  KEYS[13] tried   hash of the Spark task (write, stage, partition) on this shard: id -> the
                   attempt that pushed it (or counted it as pushed), until Spark counted
                   the task (tried-clear-1.lua)
  KEYS[14] expiry  the deadlines of messages written with an expiry (lib/lapse.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window in ms (ids acked within it are refused; 0 = off)
  ARGV[3] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[4] batch id (>= 0), or -1: no batch (plain push-if-absent; KEYS 10-11 untouched)
  ARGV[5] retention of the query's keys and of `tried` in ms (renewed by every call)
  ARGV[6] key_concurrency of a keyed queue, "" for any other
  ARGV[7] the task's attempt number, or "": no task (`tried` untouched)
  ARGV[8..] groups of four: id, delay ms, priority, msgpack body; on a keyed queue id,
          key, 0, msgpack body (without the key), each placed last in its key
  returns: {pushed (new messages, and what another attempt of the task pushed), skipped
            (the id is in the queue, or this batch already handled it), refused (acked
            within the dedupe window, or the whole batch is committed)},
           or GONE (nothing was written)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua lib/kadd.lua
  flags: none
]]
local window, batch = int(ARGV[2], 0, MAX_MS), int(ARGV[4], -1, EXACT)
local keep = int(ARGV[5], 1, MAX_MS)
local conc = int(ARGV[6], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 14 and fits(#ARGV, 7, 4, PUSH_CHUNK) and window and batch and keep
        and (conc or ARGV[6] == '') and (ARGV[7] == '' or int(ARGV[7], 0, EXACT))) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local attempt = ARGV[7]
local FROM = 8
local ids = {}
for j = FROM, #ARGV, 4 do ids[#ids + 1] = ARGV[j] end
local n = #ids

local handled = {}  -- id -> true when this batch (or task) handled it before this call
if batch >= 0 then
  local state = redis.call('HMGET', K.commit, 'committed', 'batch')
  if batch <= (tonumber(state[1]) or -1) then return {0, 0, n} end  -- a replay
  if tonumber(state[2]) ~= batch then  -- the first call of a new batch on this shard
    redis.call('UNLINK', K.wrote)
    redis.call('HSET', K.commit, 'batch', batch)
  elseif n > 0 then
    local member = bulk_read('SMISMEMBER', K.wrote, ids)
    for i = 1, n do
      if member[i] == 1 then handled[ids[i]] = true end
    end
  end
  redis.call('PEXPIRE', K.commit, keep)
end

-- What this task pushed is not pushed again (consumers may have acked it since). What
-- another attempt of it pushed counts as pushed, once, and is claimed for this attempt:
-- a later row of this attempt with the same id is then a duplicate.
local earlier, claims = 0, {}
if attempt ~= '' and n > 0 then
  local by, seen = bulk_read('HMGET', K.tried, ids), {}
  for i = 1, n do
    local id = ids[i]
    if by[i] then
      handled[id] = true
      if by[i] ~= attempt and not seen[id] then  -- the same id again: a duplicate
        earlier = earlier + 1
        claims[#claims + 1] = id
        claims[#claims + 1] = attempt
      end
    end
    seen[id] = true
  end
end

local now = now_ms()
local pushed, wake, denied = 0, false, 0
local out, placed = {}, ids  -- outcome per id of `placed` (1: pushed)
if conc then
  -- what this batch handled before is skipped; kadd skips what is stored and refuses
  -- what was acked within the window
  local items = {}
  placed = {}
  for j = FROM, #ARGV, 4 do
    if not handled[ARGV[j]] then
      items[#items + 1] = ARGV[j]; items[#items + 1] = ARGV[j + 1]
      items[#items + 1] = ARGV[j + 3]
      placed[#placed + 1] = ARGV[j]
    end
  end
  pushed, wake, denied = kadd(K, conc, true, window, now, items, 1, out)
  if pushed > 0 then redis.call('HINCRBY', K.counts, 'pushed', pushed) end
else
  out, pushed, wake = push_into(K, true, window, now, ARGV, FROM, handled)
  for _, o in ipairs(out) do if o == 2 then denied = denied + 1 end end
end
if batch >= 0 and n > 0 then
  bulk('SADD', K.wrote, ids)
  redis.call('PEXPIRE', K.wrote, keep)
end
if attempt ~= '' and pushed + earlier > 0 then
  for i, o in ipairs(out) do
    if o == 1 then claims[#claims + 1] = placed[i]; claims[#claims + 1] = attempt end
  end
  bulk('HSET', K.tried, claims)
  redis.call('PEXPIRE', K.tried, keep)
end
if wake then redis.call('PUBLISH', ARGV[3], '1') end
return {pushed + earlier, n - pushed - earlier - denied, denied}
