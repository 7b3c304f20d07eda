--[[ subscription: add or drop entries of one topic shard's subscriptions, and bump their
  version (a publish built from an older version is refused and rebuilt: lua publish).
  KEYS[1] subs (target -> "group|mode|tags|subscribed ms", "~g:<group>" -> "mode|tags",
          "~v" -> version)
  ARGV[1] "add" or "drop"   ARGV[2..] field, value pairs to add / fields to drop
  returns: the new version
  uses: lib/clock.lua
  flags: allow-oom
]]
if ARGV[1] == 'add' then
  for j = 2, #ARGV, 2 do
    local value = ARGV[j + 1]
    if string.sub(ARGV[j], 1, 1) ~= '~' then value = value .. '|' .. now_ms() end
    redis.call('HSET', KEYS[1], ARGV[j], value)
  end
else
  for j = 2, #ARGV do redis.call('HDEL', KEYS[1], ARGV[j]) end
end
return redis.call('HINCRBY', KEYS[1], '~v', 1)
