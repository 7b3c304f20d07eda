--[[ push-batch: push-if-absent for a Spark write to one shard, counted; as part of a
  streaming micro-batch (query, batch id) it also remembers every id the batch handled,
  and skips a batch the query already committed, so a replayed or half-written batch
  pushes nothing twice even after consumers acked what it wrote the first time.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq  KEYS[8] done  KEYS[9] counts
  (on a keyed queue, ordered="key": KEYS[1..3] are its kwait, kturn and kstate)
  KEYS[10] commit  hash of the query on this shard: committed = highest committed batch
                   id, batch = the uncommitted batch `wrote` belongs to
  KEYS[11] wrote   set of the ids the uncommitted batch handled (pushed, found, refused)
  KEYS[12] epoch   the queue's epoch (lib/refusal.lua gone())
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] dedupe window in ms (ids acked within it are refused; 0 = off)
  ARGV[3] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[4] batch id (>= 0), or -1: no batch (plain push-if-absent; KEYS 10-11 untouched)
  ARGV[5] retention of the query's keys in ms (renewed by every batch)
  ARGV[6] key_concurrency of a keyed queue, "" for any other
  ARGV[7..] groups of four: id, delay ms, priority, msgpack body; on a keyed queue id,
          key, 0, msgpack body (without the key), each placed last in its key
  returns: {pushed, skipped (the id is in the queue, or this batch already handled it),
            refused (acked within the dedupe window, or the whole batch is committed)},
           or GONE (nothing was written)
  uses: lib/clock.lua lib/refusal.lua lib/push.lua lib/keyed.lua
  flags: none
]]
local refused = gone(KEYS[12], ARGV[1])
if refused then return refused end
local commit, wrote = KEYS[10], KEYS[11]
local window, batch, keep = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ids = {}
for j = 7, #ARGV, 4 do ids[#ids + 1] = ARGV[j] end
local n = #ids

local handled = {}  -- id -> true when this batch handled it before this call
if batch >= 0 then
  local state = redis.call('HMGET', commit, 'committed', 'batch')
  if batch <= (tonumber(state[1]) or -1) then return {0, 0, n} end  -- a replay
  if tonumber(state[2]) ~= batch then  -- the first call of a new batch on this shard
    redis.call('UNLINK', wrote)
    redis.call('HSET', commit, 'batch', batch)
  elseif n > 0 then
    local member = bulk_read('SMISMEMBER', wrote, ids)
    for i = 1, n do
      if member[i] == 1 then handled[ids[i]] = true end
    end
  end
  redis.call('PEXPIRE', commit, keep)
end

local conc, now = tonumber(ARGV[6]), now_ms()
local pushed, wake, denied = 0, false, 0
if conc then
  -- what this batch handled before is skipped; kensure skips what is stored and
  -- refuses what was acked within the window
  local items = {}
  for j = 7, #ARGV, 4 do
    if not handled[ARGV[j]] then
      items[#items + 1] = ARGV[j]; items[#items + 1] = ARGV[j + 1]
      items[#items + 1] = ARGV[j + 3]
    end
  end
  pushed, wake, denied = kensure(KEYS, conc, window, now, items, 1)
  if pushed > 0 then redis.call('HINCRBY', KEYS[9], 'pushed', pushed) end
else
  local out
  out, pushed, wake = push_into(KEYS, true, window, now, ARGV, 7, handled)
  for _, o in ipairs(out) do if o == 2 then denied = denied + 1 end end
end
if batch >= 0 and n > 0 then
  bulk('SADD', wrote, ids)
  redis.call('PEXPIRE', wrote, keep)
end
if wake then redis.call('PUBLISH', ARGV[3], '1') end
return {pushed, n - pushed - denied, denied}
