--[[ push: add messages to one shard (plain push = upsert by id; ensure = push if absent).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] done
  KEYS[9] counts (hash: cumulative pushed, acked, retried, expired, dead)
  ARGV[1] mode: "push" (replace a message with the same id) or "ensure" (skip it)
  ARGV[2] dedupe window in ms (ensure skips ids acked within it; 0 = off)
  ARGV[3] wake channel (PUBLISHed when push_into says a waiter may need it)
  ARGV[4..] groups of four: id, delay ms, priority, msgpack body
  returns: array of 1 (pushed) / 0 (skipped by ensure), one per message
  uses: lib/clock.lua lib/push.lua
  flags: none
]]
local out, _, wake = push_into(KEYS, ARGV[1] == 'ensure', tonumber(ARGV[2]), now_ms(), ARGV, 4)
if wake then redis.call('PUBLISH', ARGV[3], '1') end
for i, o in ipairs(out) do if o == 2 then out[i] = 0 end end
return out
