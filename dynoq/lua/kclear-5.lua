--[[ kclear: delete the message groups' keys of one shard (clear-15.lua deletes the rest;
  the key fences stay, as a shard's fence does: a fence never goes back).
  KEYS[1] kwait  KEYS[2] kturn  KEYS[3] kstate  KEYS[4] epoch
  KEYS[5] krest (the keys resting for the key_rate_limit; their times in `krate` stay, so
          the limit holds across a clear)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  returns: number of keys deleted, or GONE (nothing was deleted)
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
if not (#KEYS == 5 and #ARGV == 1) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
return redis.call('UNLINK', K.kwait) + redis.call('UNLINK', K.kturn)
  + redis.call('UNLINK', K.kstate) + redis.call('UNLINK', K.krest)
