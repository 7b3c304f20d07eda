--[[ push: add messages to one shard (plain push = upsert by id; ensure = push if absent).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  KEYS[9] counts (hash: cumulative pushed, acked, retried, expired, dead)
  KEYS[10] epoch (the queue's epoch: lib/refusal.lua gone())
  KEYS[11] expiry (the deadlines of messages pushed with an expiry: lib/lapse.lua)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] mode: "push" (replace a message with the same id) or "ensure" (skip it)
  ARGV[3] dedupe window in ms (ensure skips ids acked within it; 0 = off)
  ARGV[4] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[5..] groups of four: id, delay ms, priority, msgpack body
  returns: array of 1 (pushed) / 0 (skipped by ensure), one per message; or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua
  flags: none
]]
local window = int(ARGV[3], 0, MAX_MS)
if not (#KEYS == 11 and fits(#ARGV, 4, 4, PUSH_CHUNK) and window) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local out, _, wake = push_into(K, ARGV[2] == 'ensure', window, now_ms(), ARGV, 5)
if wake then redis.call('PUBLISH', ARGV[4], '1') end
for i, o in ipairs(out) do if o == 2 then out[i] = 0 end end
return out
