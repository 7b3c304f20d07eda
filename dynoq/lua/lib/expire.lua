--[[ lib/expire: the one routine that gives deliveries back (Dyno processUnacks), used by
  pop (for what expired) and requeue (expired, or with force all, on a lease takeover).
  uses: lib/delivery.lua lib/why.lua lib/batch.lua lib/bulk.lua lib/control.lua
  give_back(K, now, upto, limit, max_retries) -> given back, dead-lettered, how many were
    looked at (K: the shard's unack, delayed, dlv, dead, why, counts, msgs and control)
    Every delivery whose deadline is <= `upto` (at most `limit` of them) leaves `unack`:
    one asked to stop ends cancelled (lib/control.lua); past `max_retries` attempts it is
    dead-lettered (its `why` says its visibility ran
    out), else it waits in `delayed`, due now; promotion then puts it back at the place
    saved in its delivery state (a concurrent queue saves none: the back of its
    priority; an ordered one's first delivery takes its place from lib/batch.lua).
]]
local function give_back(K, now, upto, limit, max_retries)
  local unack, delayed, dlv, dead, why, counts = K.unack, K.delayed, K.dlv, K.dead, K.why, K.counts
  local items = redis.call('ZRANGEBYSCORE', unack, '-inf', upto, 'LIMIT', 0, limit)
  local back, buried = 0, 0
  local steered = #items > 0 and redis.call('EXISTS', K.control) == 1
  for _, id in ipairs(items) do
    redis.call('ZREM', unack, id)
    if steered and asked(K.control, id) then
      cancelled(K.msgs, dlv, why, counts, K.control, id)
    else
      if steered then redis.call('HDEL', K.control, 'p:' .. id) end
      local d = redis.call('HGET', dlv, id)
      -- A first delivery without a state gets one: the next pop counts it, a stale token
      -- (its unack score) can no longer match, and on an ordered shard it keeps its place.
      if not d then redis.call('HSET', dlv, id, '1|' .. place_of(dlv, id) .. '|') end
      if in_flight(d) > max_retries then
        redis.call('ZADD', dead, now, id)
        record_why(why, id, now, 'x', '')
        buried = buried + 1
      else
        redis.call('ZADD', delayed, now, id)
        back = back + 1
      end
    end
  end
  if back > 0 then redis.call('HINCRBY', counts, 'expired', back) end
  if buried > 0 then redis.call('HINCRBY', counts, 'dead', buried) end
  return back, buried, #items
end
