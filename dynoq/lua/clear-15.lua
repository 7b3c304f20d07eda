--[[ clear: delete every message of one shard (the settings, lease, fencing number, counts,
  recurring messages and epoch stay). UNLINK, not DEL: the server frees a large key in a
  background thread, so clearing a shard of a million messages blocks nobody.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq      KEYS[8] done   KEYS[9] why    KEYS[10] half   KEYS[11] txs
  KEYS[12] decided KEYS[13] epoch  KEYS[14] expiry
  KEYS[15] control (only the fields of deliveries go, lib/control.lua: the pause and the
           schedules' fields stay)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  returns: number of keys deleted, or GONE (nothing was deleted)
  uses: lib/bounds.lua lib/refusal.lua lib/bulk.lua
  flags: allow-oom
]]
if not (#KEYS == 15 and #ARGV == 1) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
-- The cancels asked of deliveries and their progress go with them: one field or two a
-- delivery in flight (the rest of the hash is a few fields).
local steer = {}
for _, f in ipairs(redis.call('HKEYS', K.control)) do
  local c = string.sub(f, 1, 2)
  if c == 'x:' or c == 'p:' then steer[#steer + 1] = f end
end
if #steer > 0 then bulk('HDEL', K.control, steer) end
-- One key a call, each named: dynoq.acl grants every write by the kind of its key.
return redis.call('UNLINK', K.expiry) + redis.call('UNLINK', K.delayed) + redis.call('UNLINK', K.ready)
  + redis.call('UNLINK', K.unack) + redis.call('UNLINK', K.msgs)
  + redis.call('UNLINK', K.dlv) + redis.call('UNLINK', K.dead)
  + redis.call('UNLINK', K.seq) + redis.call('UNLINK', K.done)
  + redis.call('UNLINK', K.why) + redis.call('UNLINK', K.half)
  + redis.call('UNLINK', K.txs) + redis.call('UNLINK', K.decided)
