--[[ group-history: record a member's rebalance in its group's history, newest first,
  capped, and forgotten a while after the group's last rebalance (for dashboards).
  KEYS[1] history (list of "<ms> <entry>")
  ARGV[1] entry (JSON: member, shards, members, count)  ARGV[2] most entries kept
  ARGV[3] lifetime ms of the list after this entry
  returns: 1
  uses: lib/bounds.lua lib/clock.lua
  flags: allow-oom
]]
local most = int(ARGV[2], 1, HISTORY_CAP)
if not (#KEYS == 1 and #ARGV == 3 and most and int(ARGV[3], 1, MAX_MS)) then return BOUNDS end
redis.call('LPUSH', K.history, now_ms() .. ' ' .. ARGV[1])
redis.call('LTRIM', K.history, 0, most - 1)
redis.call('PEXPIRE', K.history, ARGV[3])
return 1
