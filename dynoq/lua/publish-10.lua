--[[ publish: add messages of one topic shard to every subscribed group whose tag
  expression matches each message, atomically (push-if-absent per group).
  KEYS[1] subs (the topic shard's subscriptions: target -> "group|mode|tags", "~v" -> version)
  KEYS[2] delayed  KEYS[3] ready  KEYS[4] unack  KEYS[5] msgs  KEYS[6] dlv  KEYS[7] dead
  KEYS[8] seq  KEYS[9] done  KEYS[10] counts  (repeated: one group of nine per target queue)
  ARGV[1] the subscriptions' version the caller built its KEYS from
  ARGV[2] dedupe window ms   ARGV[3] number of targets T
  ARGV[4 .. 3+2T] per target: its tag filter ("" = "*": every message; else "|a|b|") and
          its wake channel
  ARGV[4+2T ..] groups of five: id, delay ms, priority, tag ("" = none), msgpack body
  returns: copies added over all targets, or STALE when the subscriptions changed since
           the caller read them (it reads them again and retries)
  uses: lib/clock.lua lib/refusal.lua lib/push.lua
  flags: none
]]
if redis.call('HGET', KEYS[1], '~v') ~= ARGV[1] then return STALE end
local window, targets = tonumber(ARGV[2]), tonumber(ARGV[3])
local first = 4 + 2 * targets
local now = now_ms()
local added = 0
for t = 1, targets do
  local filter, channel = ARGV[2 + 2 * t], ARGV[3 + 2 * t]
  local items = {}
  for j = first, #ARGV, 5 do
    local tag = ARGV[j + 3]
    if filter == '' or (tag ~= '' and string.find(filter, '|' .. tag .. '|', 1, true)) then
      local m = #items
      items[m + 1], items[m + 2], items[m + 3], items[m + 4] =
        ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 4]
    end
  end
  if #items > 0 then
    local k = {}
    for i = 1, 9 do k[i] = KEYS[1 + 9 * (t - 1) + i] end
    local _, pushed, wake = push_into(k, true, window, now, items, 1)
    if wake then redis.call('PUBLISH', channel, '1') end
    added = added + pushed
  end
end
return added
