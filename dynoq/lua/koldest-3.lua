--[[ koldest: when the oldest waiting message of the next keys to be served on a keyed
  shard (ordered="key") was enqueued, read-only: q.stats() takes the older of this and
  stats-7.lua's due retries as the shard's oldest waiting message. Bounded: it reads the
  heads (a key's head is its oldest waiting message) of the first LOOK keys in turn
  order, and stops once it has read BUDGET bytes of their records (32 records of 1 MB
  took 164 ms). So it is exact while the shard has at most LOOK keys ready and their
  heads are small; keys held back by a delivery in flight or a retry are not looked at
  (docs/groups.md).
  KEYS[1] kturn  KEYS[2] kstate  KEYS[3] msgs
  returns: the ms the oldest of those heads was enqueued, or -1 when no key is ready
  uses: lib/bounds.lua lib/record.lua lib/kstate.lua
  flags: no-writes
]]
local LOOK, BUDGET = 32, 262144
if not (#KEYS == 3 and #ARGV == 0) then return BOUNDS end
local keys = redis.call('ZRANGE', K.kturn, 0, LOOK - 1)
if #keys == 0 then return -1 end
local oldest, read = -1, 0
for _, v in ipairs(redis.call('HMGET', K.kstate, unpack(keys))) do
  local head = kunpack(v)[4]
  if head ~= '' then
    local rec = redis.call('HGET', K.msgs, head)
    local enq, off = times(rec)
    if enq and (oldest < 0 or enq + off < oldest) then oldest = enq + off end
    read = read + (rec and #rec or 0)
    if read >= BUDGET then break end
  end
end
return oldest
