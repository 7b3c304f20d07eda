--[[ clear: delete every message of one shard (the settings, lease, fencing number, counts,
  recurring messages and epoch stay). UNLINK, not DEL: the server frees a large key in a
  background thread, so clearing a shard of a million messages blocks nobody.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq      KEYS[8] done   KEYS[9] why    KEYS[10] half   KEYS[11] txs
  KEYS[12] decided KEYS[13] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  returns: number of keys deleted, or GONE (nothing was deleted)
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
if not (#KEYS == 13 and #ARGV == 1) then return BOUNDS end
local refused = gone(KEYS[13], ARGV[1])
if refused then return refused end
-- One key a call, each named: dynoq.acl grants every write by the kind of its key.
return redis.call('UNLINK', KEYS[1]) + redis.call('UNLINK', KEYS[2])
  + redis.call('UNLINK', KEYS[3]) + redis.call('UNLINK', KEYS[4])
  + redis.call('UNLINK', KEYS[5]) + redis.call('UNLINK', KEYS[6])
  + redis.call('UNLINK', KEYS[7]) + redis.call('UNLINK', KEYS[8])
  + redis.call('UNLINK', KEYS[9]) + redis.call('UNLINK', KEYS[10])
  + redis.call('UNLINK', KEYS[11]) + redis.call('UNLINK', KEYS[12])
