--[[ ack: finish deliveries of one shard; a stale delivery token changes nothing.
  KEYS[1] unack  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] done  KEYS[5] lease
  KEYS[6] why    KEYS[7] counts  KEYS[8] epoch  KEYS[9] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] the caller's value of the lease ("" = none: the shard is not leased by it)
  ARGV[3] dedupe window ms (acked ids are remembered in `done` for it; 0 = off)
  ARGV[4] wake channel, PUBLISHed when something was acked ("" = never: only on an ordered
          shard does an ack make the next message deliverable)
  ARGV[5] a delivery token T, ARGV[6] a count n, then n ids delivered under T, then pairs:
          id, delivery token ("" = by id alone: whatever delivery is current) (lib/acks.lua)
  returns: number of messages acked, or GONE or FENCED (lib/refusal.lua)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua lib/bulk.lua lib/pin.lua
        lib/done.lua lib/acks.lua lib/control.lua
  flags: allow-oom
]]
local window = int(ARGV[3], 0, MAX_MS)
local ids, toks = acks(5, IDS_CHUNK)
if not (#KEYS == 9 and ids and window) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1]) or fenced(K.lease, ARGV[2])
if refused then return refused end
if #ids == 0 then return 0 end
local deadlines = bulk_read('ZMSCORE', K.unack, ids)
-- No states but the pin (a concurrent queue's first deliveries): none to read or delete.
local states = held(K.dlv)
local dlvs = states and bulk_read('HMGET', K.dlv, ids) or {}
local done_ids = {}
for k, id in ipairs(ids) do
  if deadlines[k] and matches(dlvs[k], toks[k], deadlines[k]) then
    done_ids[#done_ids + 1] = id
  end
end
if #done_ids == 0 then return 0 end
-- An id given twice is removed once: ZREM's count is the number acked.
local acked = bulk('ZREM', K.unack, done_ids)
bulk('HDEL', K.msgs, done_ids)
if states then bulk('HDEL', K.dlv, done_ids) end
-- A message that failed before and now succeeded no longer needs its reason.
if redis.call('EXISTS', K.why) == 1 then bulk('HDEL', K.why, done_ids) end
-- Its progress, and a cancel asked too late (it ended well first), go with it.
forget(K.control, done_ids)
redis.call('HINCRBY', K.counts, 'acked', acked)
if window > 0 then remember_acked(K.done, done_ids, window, acked) end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[4], '1') end
return acked
