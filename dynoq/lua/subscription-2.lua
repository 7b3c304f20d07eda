--[[ subscription: add or drop entries of one topic shard's subscriptions, and bump their
  version (a publish built from an older version is refused and rebuilt: lua publish).
  KEYS[1] subs (target -> "group|mode|tags|subscribed ms", "~g:<group>" -> "mode|tags",
          "~v" -> version)
  KEYS[2] epoch (the topic's epoch)
  ARGV[1] the caller's epoch of the topic ("" = not checked)
  ARGV[2] "add" or "drop"   ARGV[3..] field, value pairs to add / fields to drop
  returns: the new version, or GONE (the topic is gone: nothing was written)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua
  flags: allow-oom
]]
-- add: two entries (the group's and its queue's); drop: a topic's entries
if not (#KEYS == 2 and fits(#ARGV, 2, 1, 2 * MAX_TARGETS)) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if ARGV[2] == 'add' then
  for j = 3, #ARGV, 2 do
    local value = ARGV[j + 1]
    if string.sub(ARGV[j], 1, 1) ~= '~' then value = value .. '|' .. now_ms() end
    redis.call('HSET', K.subs, ARGV[j], value)
  end
else
  for j = 3, #ARGV do redis.call('HDEL', K.subs, ARGV[j]) end
end
return redis.call('HINCRBY', K.subs, '~v', 1)
