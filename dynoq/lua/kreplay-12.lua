--[[ kreplay: move dead-lettered messages of a keyed shard back, each last in its key,
  with its attempts reset.
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] dead  KEYS[7] dlv    KEYS[8] why    KEYS[9] unack   KEYS[10] delayed
  KEYS[11] counts  KEYS[12] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] limit (used when no ids are given)  ARGV[3] wake channel
  ARGV[4] key_concurrency  ARGV[5..] ids to replay (none = the oldest `limit`)
  returns: number of messages replayed, or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/replay.lua lib/knum.lua lib/keyed.lua lib/kplace.lua
  flags: allow-oom
]]
local limit, conc = int(ARGV[2], 1, SWEEP_LIMIT), int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 12 and fits(#ARGV, 4, 1, IDS_CHUNK) and limit and conc) then
  return BOUNDS
end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local places, n = {}, 0
for _, id in ipairs(dead_ids(K.dead, ARGV, 5, limit)) do
  local rec = redis.call('HGET', K.msgs, id)
  local key = kkey(rec)
  if key and redis.call('ZREM', K.dead, id) == 1 then
    redis.call('HDEL', K.dlv, id)
    places[#places + 1] = id
    places[#places + 1] = key
    places[#places + 1] = kbody(rec)
    places[#places + 1] = string.match(rec, '^(%w+),')  -- its enqueued time, kept
    places[#places + 1] = kseq(redis.call('INCR', K.seq))
    n = n + 1
  end
end
kplace(K, places, conc)
if n > 0 then redis.call('PUBLISH', ARGV[3], '1') end
return n
