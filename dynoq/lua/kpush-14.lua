--[[ kpush: add messages to one shard of a keyed queue (ordered="key"), each last in its key.
  KEYS[1] msgs   KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] done   KEYS[7] unack  KEYS[8] delayed  KEYS[9] dead  KEYS[10] dlv
  KEYS[11] why   KEYS[12] counts  KEYS[13] epoch  KEYS[14] expiry (lib/lapse.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] mode: "push" (replace a message with the same id: the old copy leaves every
          state, its key moves on, the new one goes last in its key) or "ensure" (skip it)
  ARGV[3] dedupe window in ms (ensure skips ids acked within it; 0 = off)
  ARGV[4] wake channel (PUBLISHed when the shard had no key ready and now has)
  ARGV[5] key_concurrency
  ARGV[6..] groups of three: id, key, msgpack body (without the key); the list is in push
          order: a key's messages are delivered in it
  returns: array of 1 (pushed) / 0 (skipped by ensure), one per message; or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/kadd.lua
  flags: none
]]
local window, conc = int(ARGV[3], 0, MAX_MS), int(ARGV[5], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 14 and fits(#ARGV, 5, 3, PUSH_CHUNK) and window and conc) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local ensure = ARGV[2] == 'ensure'
local out = {}
local pushed, wake = kadd(K, conc, ensure, window, now_ms(), ARGV, 6, out)
if pushed > 0 then redis.call('HINCRBY', K.counts, 'pushed', pushed) end
if wake then redis.call('PUBLISH', ARGV[4], '1') end
return out
