--[[ pause: pause or resume one shard of a queue. While paused, its pops, probes and keyed
  acks deliver nothing (lib/paused.lua): pushes are kept, deliveries in flight may still
  be acked, and expired ones still go back; resuming wakes the queue's consumers.
  KEYS[1] epoch  KEYS[2] control (its field `paused`: since when, ms)
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] "1" pause, "0" resume
  ARGV[3] wake channel (PUBLISHed on resume)
  returns: 1 if the shard changed, 0 if it already was so; or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua
  flags: allow-oom
]]
if not (#KEYS == 2 and #ARGV == 3 and (ARGV[2] == '1' or ARGV[2] == '0')) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
if ARGV[2] == '1' then
  return redis.call('HSETNX', K.control, 'paused', now_ms())
end
local changed = redis.call('HDEL', K.control, 'paused')
if changed == 1 then redis.call('PUBLISH', ARGV[3], '1') end
return changed
