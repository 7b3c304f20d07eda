--[[ slots: a queue's max_running (DESIGN §3.9): the deliveries its consumers may have in
  flight at once, across every consumer, as slots each consumer takes before it pops and
  gives back when its batch ends. A holder's slots go back by themselves when it stops
  renewing them (a killed consumer): its lease, renewed at every heartbeat, runs out.
  KEYS[1] slots (hash: holder -> slots held, and `total` -> their sum)
  KEYS[2] slot_leases (zset: holder -> when its slots go back, ms)
  ARGV[1] max_running  ARGV[2] holder (the consumer's)  ARGV[3] change: n > 0 takes up to
          n, n < 0 gives n back, 0 renews  ARGV[4] lease ms  ARGV[5] wake channel
          (PUBLISHed when slots are given back to a queue whose slots were all taken)
  returns: {slots taken or given back, slots held by everyone after}
  uses: lib/bounds.lua lib/clock.lua lib/bulk.lua
  flags: allow-oom
]]
local most, change = int(ARGV[1], 1, MAX_RUNNING), int(ARGV[3], -MAX_RUNNING, MAX_RUNNING)
local ttl = int(ARGV[4], 1, MAX_MS)
if not (#KEYS == 2 and #ARGV == 5 and most and change and ttl) then return BOUNDS end
local now, holder = now_ms(), ARGV[2]
-- Holders whose lease ran out (a consumer killed): their slots go back, a few a call.
local gone = redis.call('ZRANGEBYSCORE', K.slot_leases, '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  local held = bulk_read('HMGET', K.slots, gone)
  local freed = 0
  for i = 1, #gone do freed = freed + (tonumber(held[i]) or 0) end
  redis.call('HINCRBY', K.slots, 'total', -freed)
  bulk('HDEL', K.slots, gone)
  bulk('ZREM', K.slot_leases, gone)
end
local total = tonumber(redis.call('HGET', K.slots, 'total') or '0')
local mine = tonumber(redis.call('HGET', K.slots, holder) or '0')
local done = 0
if change > 0 then
  done = math.max(math.min(change, most - total), 0)
elseif change < 0 then
  done = -math.min(-change, mine)
end
if done ~= 0 then
  redis.call('HINCRBY', K.slots, 'total', done)
  total, mine = total + done, mine + done
  if mine > 0 then
    redis.call('HSET', K.slots, holder, mine)
  else
    redis.call('HDEL', K.slots, holder)
  end
  if done < 0 and total - done >= most then redis.call('PUBLISH', ARGV[5], '1') end
end
if mine > 0 then
  redis.call('ZADD', K.slot_leases, now + ttl, holder)
else
  redis.call('ZREM', K.slot_leases, holder)
end
return {math.abs(done), total}
