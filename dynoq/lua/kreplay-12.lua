--[[ kreplay: move dead-lettered messages of a keyed shard back, each last in its key,
  with its attempts reset.
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] dead  KEYS[7] dlv    KEYS[8] why    KEYS[9] unack   KEYS[10] delayed
  KEYS[11] counts  KEYS[12] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] limit (used when no ids are given)  ARGV[3] wake channel
  ARGV[4] key_concurrency  ARGV[5..] ids to replay (none = the oldest `limit`)
  returns: number of messages replayed, or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/keyed.lua
  flags: allow-oom
]]
local limit, conc = int(ARGV[2], 1, SWEEP_LIMIT), int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 12 and fits(#ARGV, 4, 1, IDS_CHUNK) and limit and conc) then
  return BOUNDS
end
local refused = gone(KEYS[12], ARGV[1])
if refused then return refused end
local K = {msgs = KEYS[1], kwait = KEYS[2], kturn = KEYS[3], kstate = KEYS[4],
           seq = KEYS[5], dead = KEYS[6], dlv = KEYS[7], why = KEYS[8], unack = KEYS[9],
           delayed = KEYS[10]}
local msgs, seq, dead, dlv = KEYS[1], KEYS[5], KEYS[6], KEYS[7]
local ids = {}
if #ARGV > 4 then
  for j = 5, #ARGV do ids[#ids + 1] = ARGV[j] end
else
  ids = redis.call('ZRANGE', dead, 0, limit - 1)
end
local places, n = {}, 0
for _, id in ipairs(ids) do
  local rec = redis.call('HGET', msgs, id)
  local key = kparse(rec)
  if key and redis.call('ZREM', dead, id) == 1 then
    redis.call('HDEL', dlv, id)
    places[#places + 1] = id
    places[#places + 1] = key
    places[#places + 1] = kbody(rec)
    places[#places + 1] = string.match(rec, '^(%w+),')  -- its enqueued time, kept
    places[#places + 1] = kseq(redis.call('INCR', seq))
    n = n + 1
  end
end
kplace(K, places, conc)
if n > 0 then redis.call('PUBLISH', ARGV[3], '1') end
return n
