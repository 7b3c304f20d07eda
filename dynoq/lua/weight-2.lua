--[[ weight: set the fairness weight of one key of a keyed shard (lib/kweight.lua). A
  weight of 1 (the default) deletes the key's entry; a new weight starts a new round.
  KEYS[1] epoch  KEYS[2] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] the key  ARGV[3] its weight, 1..MAX_WEIGHT
  returns: the key's weight before the call (1 when it had none); 0 when the shard holds
           MAX_WEIGHTED weighted keys and this is not one of them (nothing changed); or
           GONE
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
local w = int(ARGV[3], 1, MAX_WEIGHT)
if not (#KEYS == 2 and #ARGV == 3 and w) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local field = 'w:' .. ARGV[2]
local old = tonumber(string.match(redis.call('HGET', K.control, field) or '', '^(%d+)|') or 1)
if w == 1 then
  if redis.call('HDEL', K.control, field) == 1
    and redis.call('HINCRBY', K.control, 'weighted', -1) <= 0 then
    redis.call('HDEL', K.control, 'weighted')
  end
  return old
end
if old == 1 then
  if tonumber(redis.call('HGET', K.control, 'weighted') or 0) >= MAX_WEIGHTED then return 0 end
  redis.call('HINCRBY', K.control, 'weighted', 1)
end
redis.call('HSET', K.control, field, w .. '|0|')
return old
