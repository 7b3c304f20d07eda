--[[ lib/push: add messages to one queue shard; shared by push and publish.
  uses: lib/promote.lua lib/bulk.lua lib/record.lua lib/pin.lua lib/place.lua
  push_into(k, ensure, window, now, items, from, skip) -> outcome per item, added, wake
    k: {delayed, ready, unack, msgs, dlv, dead, seq, done, counts} of the shard
    ensure: skip an id that exists (or was acked within `window` ms); else replace it
    items: a flat list, from index `from` on, of id, delay ms, priority, body for each
           message (flat, not a table each: ARGV itself can be passed, and a push of
           thousands makes no table per message); the same id twice: the first counts
    skip: ids to skip as handled already (a set, or nil)
    outcome: 1 added, 0 skipped (it exists, or was handled), 2 refused (acked within
    the dedupe window and not pushed again since)
    wake: true when a waiter may need the news: the shard's ready set was empty and now
    is not, or a delayed message is due before every one already delayed. Anything else
    was announced by an earlier push: a waiter looks again after each wake-up until it
    finds ready empty, and naps only until the earliest due time it saw. (A PUBLISH on
    every push costs the server a call and every subscriber a read.)
    Promotes what is due first, so ready order is exactly "became ready first".
]]
local function push_into(k, ensure, window, now, items, from, skip)
  local delayed, ready, unack, msgs, dlv, dead, seq, done, counts =
    k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9]
  promote(delayed, ready, msgs, dlv, seq, now, 5000)
  local n = math.floor((#items - from + 1) / 4)
  local base = redis.call('INCRBY', seq, n) - n
  local out, seen = {}, {}
  local plan = placing(delayed, ready, now)
  local enq = stamp(now) .. ','
  local pushed = 0
  for i = 1, n do
    local j = from + 4 * (i - 1)
    local id, delay, prio = items[j], tonumber(items[j + 1]), tonumber(items[j + 2])
    local rec = enq .. string.format('%d,%d,', delay, prio) .. items[j + 3]
    local added, outcome = false, 0
    if seen[id] or (skip and skip[id]) then
      added = false
    elseif ensure then
      local acked = window > 0 and redis.call('ZSCORE', done, id)
      if not (acked and tonumber(acked) + window > now) then -- not acked within the window
        added = redis.call('HSETNX', msgs, id, rec) == 1
      elseif redis.call('HEXISTS', msgs, id) == 0 then
        outcome = 2
      end
    else
      if redis.call('HSET', msgs, id, rec) == 0 then
        -- replaced: the old copy leaves every state, its deliveries become stale
        redis.call('ZREM', ready, id); redis.call('ZREM', delayed, id)
        redis.call('ZREM', unack, id); redis.call('ZREM', dead, id)
        redis.call('HDEL', dlv, id)
      end
      added = true
    end
    seen[id] = true
    if added then
      pushed = pushed + 1
      out[i] = 1
      place(plan, id, delay, prio, base + i)
    else
      out[i] = outcome
    end
  end
  local wake = false
  if pushed > 0 then
    wake = placed(plan)
    redis.call('HINCRBY', counts, 'pushed', pushed)
  end
  return out, pushed, wake
end
