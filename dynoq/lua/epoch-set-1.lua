--[[ epoch-set: write a queue's (or topic's) epoch into one of its shards, where every
  script of the shard checks it (lib/refusal.lua gone()). Opening a queue writes it into
  each shard; a shard left by an earlier creation of the queue holds an older epoch and
  is taken over; one that holds a later epoch belongs to a creation newer than the
  caller's (the caller's view is stale) and is left alone, unless forced.
  KEYS[1] epoch (string "<epoch>|<shards>": the epoch of the creation that wrote it and
          its number of shards)
  ARGV[1] the value to write ("<epoch>|<shards>", the epoch as open-1.lua makes it)
  ARGV[2] "newer": write it unless the key holds the same or a later epoch;
          "force": write it (the key holds a later epoch that no stored queue has)
  returns: {1 if written else 0, the value the key held before ("" = none)}
  uses: lib/bounds.lua
  flags: allow-oom
]]
local function stamp(value)
  return tonumber(string.sub(value, 1, 13)) or -1, string.sub(value, 14, 21)
end
if not (#KEYS == 1 and #ARGV == 2) then return BOUNDS end
local held = redis.call('GET', K.epoch)
local write = not held or ARGV[2] == 'force'
if not write and held ~= ARGV[1] then
  local ms_held, rnd_held = stamp(held)
  local ms_new, rnd_new = stamp(ARGV[1])
  write = ms_held < ms_new or (ms_held == ms_new and rnd_held < rnd_new)
end
if write then redis.call('SET', K.epoch, ARGV[1]) end
return {write and 1 or 0, held or ''}
