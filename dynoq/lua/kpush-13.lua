--[[ kpush: add messages to one shard of a keyed queue (ordered="key"), each last in its key.
  KEYS[1] msgs   KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] done   KEYS[7] unack  KEYS[8] delayed  KEYS[9] dead  KEYS[10] dlv
  KEYS[11] why   KEYS[12] counts  KEYS[13] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] mode: "push" (replace a message with the same id: the old copy leaves every
          state, its key moves on, the new one goes last in its key) or "ensure" (skip it)
  ARGV[3] dedupe window in ms (ensure skips ids acked within it; 0 = off)
  ARGV[4] wake channel (PUBLISHed when the shard had no key ready and now has)
  ARGV[5] key_concurrency
  ARGV[6..] groups of three: id, key, msgpack body (without the key); the list is in push
          order: a key's messages are delivered in it
  returns: array of 1 (pushed) / 0 (skipped by ensure), one per message; or GONE
  uses: lib/clock.lua lib/refusal.lua lib/keyed.lua
  flags: none
]]
local refused = gone(KEYS[13], ARGV[1])
if refused then return refused end
local K = {msgs = KEYS[1], kwait = KEYS[2], kturn = KEYS[3], kstate = KEYS[4],
           seq = KEYS[5], unack = KEYS[7], delayed = KEYS[8], dead = KEYS[9],
           dlv = KEYS[10], why = KEYS[11]}
local msgs, done, kturn, seq, counts = KEYS[1], KEYS[6], KEYS[3], KEYS[5], KEYS[12]
local ensure, window, conc = ARGV[2] == 'ensure', tonumber(ARGV[3]), tonumber(ARGV[5])
local now = now_ms()
local n = math.floor((#ARGV - 5) / 3)
local idle = redis.call('EXISTS', kturn) == 0
local base = redis.call('INCRBY', seq, n) - n
local enq = stamp(now)
local out, seen, pushed = {}, {}, 0
for i = 1, n do
  local j = 6 + 3 * (i - 1)
  local id, key, body = ARGV[j], ARGV[j + 1], ARGV[j + 2]
  local outcome = 0
  if not seen[id] then
    local old = redis.call('HGET', msgs, id)
    local add = true
    if old then
      if ensure then add = false else kdrop(K, id, old, conc) end
    elseif ensure and window > 0 then
      local acked = redis.call('ZSCORE', done, id)
      if acked and tonumber(acked) + window > now then add = false; outcome = 2 end
    end
    if add then
      kplace(K, id, key, body, enq, kseq(base + i), conc)
      outcome = 1
      pushed = pushed + 1
    end
  end
  seen[id] = true
  out[i] = outcome == 1 and 1 or 0
end
if pushed > 0 then redis.call('HINCRBY', counts, 'pushed', pushed) end
if idle and pushed > 0 then redis.call('PUBLISH', ARGV[4], '1') end
return out
