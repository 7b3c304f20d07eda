--[[ ack: finish deliveries of one shard; a stale delivery token changes nothing.
  KEYS[1] unack  KEYS[2] msgs  KEYS[3] dlv  KEYS[4] done  KEYS[5] lease
  ARGV[1] lease token of the caller ("" = none: the shard is not leased by it)
  ARGV[2] dedupe window ms (acked ids are remembered in `done` for it; 0 = off)
  ARGV[3..] pairs: id, delivery token ("" = by id alone: whatever delivery is current)
  returns: number of messages acked, or -1 when the caller's lease is gone (fenced)
]]
local unack, msgs, dlv, done, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if ARGV[1] ~= '' and redis.call('GET', lease) ~= ARGV[1] then return -1 end
local window = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids, toks = {}, {}
for j = 3, #ARGV, 2 do
  ids[#ids + 1] = ARGV[j]
  toks[#toks + 1] = ARGV[j + 1]
end
local deadlines = redis.call('ZMSCORE', unack, unpack(ids))
local dlvs = redis.call('HMGET', dlv, unpack(ids))
local done_ids, stamps, seen = {}, {}, {}
for k, id in ipairs(ids) do
  local d = dlvs[k]
  if not seen[id] and deadlines[k] and (toks[k] == '' or (d and string.match(d, '^%d*|%d*|(.*)$') == toks[k])) then
    seen[id] = true
    done_ids[#done_ids + 1] = id
    stamps[#stamps + 1] = now
    stamps[#stamps + 1] = id
  end
end
local acked = #done_ids
if acked > 0 then
  redis.call('ZREM', unack, unpack(done_ids))
  redis.call('HDEL', msgs, unpack(done_ids))
  redis.call('HDEL', dlv, unpack(done_ids))
  if window > 0 then redis.call('ZADD', done, unpack(stamps)) end
end
if window > 0 and acked > 0 then
  -- Trim a bounded number of ids older than the window (at most what was added, plus some).
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now - window, 'LIMIT', 0, acked + 10)
  if #old > 0 then redis.call('ZREM', done, unpack(old)) end
end
return acked
