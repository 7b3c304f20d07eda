--[[ cancel: a waiting message of one shard is deleted and counted cancelled; one in
  flight is asked to stop (lib/control.lua: it ends cancelled when its delivery ends, by
  its consumer's nack or when it expires) and stays in flight meanwhile, so that an
  ordered shard stays blocked until its handler is done.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] why
  KEYS[7] counts   KEYS[8] epoch  KEYS[9] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)  ARGV[2] id
  returns: 1 cancelled (it waited), 2 asked to stop (it runs), 0 neither (dead-lettered,
           prepared or unknown: nothing changed); or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/clock.lua lib/bulk.lua lib/control.lua
  flags: allow-oom
]]
if not (#KEYS == 9 and #ARGV == 2) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
return cancel_plain(K, ARGV[2])
