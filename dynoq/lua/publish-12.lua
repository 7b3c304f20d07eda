--[[ publish: add messages of one topic shard to every subscribed group whose tag
  expression matches each message, atomically (push-if-absent per group).
  KEYS[1] subs (the topic shard's subscriptions: target -> "group|mode|tags", "~v" -> version)
  KEYS[2] epoch (the topic's epoch: every group queue of the topic shares it)
  KEYS[3] delayed|kwait  KEYS[4] ready|kturn  KEYS[5] unack|kstate  KEYS[6] msgs
  KEYS[7] dlv  KEYS[8] dead  KEYS[9] seq  KEYS[10] done  KEYS[11] counts
  KEYS[12] expiry (lib/lapse.lua)
  KEYS[3..] repeated: one group of ten per target queue (a keyed topic's group queues
  pass kwait, kturn, kstate where the others pass delayed, ready, unack)
  ARGV[1] the caller's epoch of the topic ("" = not checked)
  ARGV[2] the subscriptions' version the caller built its KEYS from
  ARGV[3] dedupe window ms   ARGV[4] number of targets T
  ARGV[5] key_concurrency of a keyed topic (ordered="key"), "" for any other: each
          message then goes last in its key in every matching group (lib/kadd.lua)
  ARGV[6 .. 5+2T] per target: its tag filter ("" = "*": every message; else "|a|b|") and
          its wake channel
  ARGV[6+2T ..] groups of five: id, delay ms, priority, tag ("" = none), msgpack body
          (on a keyed topic: id, key, 0, tag, msgpack body without the key)
  returns: copies added over all targets, GONE (the topic is gone: nothing was written),
           or STALE when the subscriptions changed since the caller read them (it reads
           them again and retries)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/push.lua lib/publish.lua
  flags: none
]]
local window, targets = int(ARGV[3], 0, MAX_MS), int(ARGV[4], 0, MAX_TARGETS)
local conc = int(ARGV[5], 1, MAX_KEY_CONCURRENCY)
if not (window and targets and (conc or ARGV[5] == '') and #KEYS == 2 + 10 * targets
        and fits(#ARGV, 5 + 2 * targets, 5,
                 math.min(PUSH_CHUNK, math.floor(MAX_COPIES / math.max(targets, 1))))) then
  return BOUNDS
end
local first = 6 + 2 * targets
-- Each filter is searched once per message, each tag once per group queue: bounded, and
-- each message's tag as a filter holds it ("|tag|") made once, not once per group queue.
for t = 1, targets do
  if #ARGV[4 + 2 * t] > MAX_FILTER_BYTES then return BOUNDS end
end
local needles = {}
for j = first, #ARGV, 5 do
  local tag = ARGV[j + 3]
  if #tag > MAX_TAG_BYTES then return BOUNDS end
  needles[j] = tag ~= '' and '|' .. tag .. '|'
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if redis.call('HGET', K.subs, '~v') ~= ARGV[2] then return STALE end
local now = now_ms()
local promoting = promote_share(targets)
local added = 0
for t = 1, targets do
  local filter, channel = ARGV[4 + 2 * t], ARGV[5 + 2 * t]
  local items = {}
  for j = first, #ARGV, 5 do
    if filter == '' or (needles[j] and string.find(filter, needles[j], 1, true)) then
      local m = #items
      if conc then
        items[m + 1], items[m + 2], items[m + 3] = ARGV[j], ARGV[j + 1], ARGV[j + 4]
      else
        items[m + 1], items[m + 2], items[m + 3], items[m + 4] =
          ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 4]
      end
    end
  end
  if #items > 0 then
    added = added + publish_into(group_keys(t), conc, window, now, items, channel, promoting)
  end
end
return added
