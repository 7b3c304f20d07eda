--[[ lib/push: add messages to one queue shard; shared by push and publish.
  uses: lib/promote.lua lib/bulk.lua lib/record.lua lib/pin.lua lib/place.lua lib/firsts.lua
        lib/lapse.lua
  push_into(k, ensure, window, now, items, from, skip, promoting)
    -> outcome per item, added, wake
    k: the shard's keys by name (delayed, ready, unack, msgs, dlv, dead, seq, done,
       counts, and `expiry` where the script takes messages with an expiry:
       lib/lapse.lua): a script's `K` (dynoq/_core/lua.py)
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
    Promotes what is due first (at most `promoting`, PROMOTE when nil), so ready order is
    exactly "became ready first" while no more than that fell due since the last look.
  PROMOTE  due messages one push promotes first (25 ms of the server's time, about)
  promote_share(targets) -> what each of `targets` shards of one call promotes: PROMOTE
    shared (a publish pushes into each group queue of a topic in one call)
]]
local PROMOTE = 5000

local function promote_share(targets)
  return math.max(math.floor(PROMOTE / math.max(targets, 1)), 1)
end

local function push_into(k, ensure, window, now, items, from, skip, promoting)
  local delayed, ready, unack, msgs, dlv, dead, seq, done, counts =
    k.delayed, k.ready, k.unack, k.msgs, k.dlv, k.dead, k.seq, k.done, k.counts
  promote(delayed, ready, msgs, dlv, seq, now, promoting or PROMOTE)
  local n = math.floor((#items - from + 1) / 4)
  local base = redis.call('INCRBY', seq, n) - n
  local out = {}
  local ids, at = first_ids(items, from, 4, out, skip)  -- not handled already
  if ensure and #ids > 0 then
    -- Skip what exists; refuse what was acked within the window (and is not here).
    local there = bulk_read('HMGET', msgs, ids)
    local acked = window > 0 and bulk_read('ZMSCORE', done, ids) or {}
    local keep, keep_at = {}, {}
    for m, id in ipairs(ids) do
      if not there[m] then
        if acked[m] and tonumber(acked[m]) + window > now then
          out[at[m]] = 2
        else
          keep[#keep + 1] = id
          keep_at[#keep_at + 1] = at[m]
        end
      end
    end
    ids, at = keep, keep_at
  end
  -- One HSET for the batch (a call a message costs the server more than the writes).
  local enq = stamp(now) .. ','
  -- The common header (no delay, priority 0) made once: formatting two numbers at every
  -- message cost about as much as the rest of its record.
  local plain, fields, fmt = enq .. '0,0,', {}, string.format
  for m, id in ipairs(ids) do
    local j = from + 4 * (at[m] - 1)
    local delay, prio = items[j + 1], items[j + 2]
    fields[2 * m - 1] = id
    fields[2 * m] = (delay == '0' and prio == '0' and plain
                     or enq .. fmt('%d,%d,', tonumber(delay), tonumber(prio))) .. items[j + 3]
  end
  local expiry = k.expiry
  if bulk('HSET', msgs, fields) < #ids then
    -- Some replaced a message with the same id (a plain push; rare): the old copies
    -- leave every state, their deliveries become stale. Before placing the new ones.
    bulk('ZREM', ready, ids); bulk('ZREM', delayed, ids)
    bulk('ZREM', unack, ids); bulk('ZREM', dead, ids)
    bulk('HDEL', dlv, ids)
    if expiry then bulk('ZREM', expiry, ids) end
  end
  local plan = placing(delayed, ready, now)
  for m, id in ipairs(ids) do
    local i = at[m]
    local j = from + 4 * (i - 1)
    out[i] = 1
    place(plan, id, tonumber(items[j + 1]), tonumber(items[j + 2]), base + i)
    if expiry then note(expiry, id, items[j + 3], now) end
  end
  local pushed = #ids
  local wake = false
  if pushed > 0 then
    wake = placed(plan)
    redis.call('HINCRBY', counts, 'pushed', pushed)
  end
  return out, pushed, wake
end
