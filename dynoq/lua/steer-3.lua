--[[ steer: a consumer's look at its deliveries that run long: it keeps the progress their
  handlers reported and learns which were asked to stop (lib/control.lua).
  KEYS[1] unack  KEYS[2] control  KEYS[3] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] n, then n ids to look at, then pairs: id, progress (JSON text, at most
          MAX_PROGRESS bytes), kept as `p:<id>` while the id is in flight (else dropped:
          its delivery ended meanwhile)
  returns: one number per id looked at, in order: 1 asked to stop, 0 not; or GONE
  uses: lib/bounds.lua lib/refusal.lua
  flags: allow-oom
]]
local n = int(ARGV[2], 0, IDS_CHUNK)
if not (#KEYS == 3 and n and #ARGV >= 2 + n and (#ARGV - 2 - n) % 2 == 0
        and (#ARGV - 2 - n) / 2 <= IDS_CHUNK) then
  return BOUNDS
end
for j = 3 + n, #ARGV, 2 do
  if #ARGV[j + 1] > MAX_PROGRESS then return BOUNDS end
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
for j = 3 + n, #ARGV, 2 do
  if redis.call('ZSCORE', K.unack, ARGV[j]) then
    redis.call('HSET', K.control, 'p:' .. ARGV[j], ARGV[j + 1])
  end
end
local out = {}
if n > 0 then
  local fields = {}
  for i = 1, n do fields[i] = 'x:' .. ARGV[2 + i] end
  local marks = redis.call('HMGET', K.control, unpack(fields))
  for i = 1, n do out[i] = marks[i] and 1 or 0 end
end
return out
