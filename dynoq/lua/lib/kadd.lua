--[[ lib/kadd: which of a push's messages go into a keyed shard (lib/keyed.lua), each last
  in its key: kpush, and push-if-absent into a keyed group queue (publish, a topic's
  commit) or a keyed queue (Spark's push-batch).
  uses: lib/bulk.lua lib/record.lua lib/firsts.lua lib/knum.lua lib/kdrop.lua lib/kplace.lua
        lib/lapse.lua
  kadd(K, conc, ensure, window, now, items, from, out) -> how many were placed, whether
    the shard's waiters need a wake (it had no key ready), how many were refused (ensure:
    acked within `window` ms); places the first of each id of `items` (from index `from`
    on: id, key, body without the key), each last in its key: ensure skips an id that is
    stored, else its stored copy is replaced (it leaves every state first); out[i] = 1
    for each placed, 0 for the others. K needs done and seq besides the keys kplace and
    kdrop use, and `expiry` where the script takes messages with an expiry (lib/lapse.lua). The caller counts what was pushed and wakes: _core/grants.py grants a role
    what every function its scripts call sends, so a write to counts here would be
    granted to every role whose scripts call kadd.
]]
local function kadd(K, conc, ensure, window, now, items, from, out)
  local msgs, seq, done, kturn = K.msgs, K.seq, K.done, K.kturn
  local idle = redis.call('EXISTS', kturn) == 0  -- no key ready: waiters need the news
  local n = math.floor((#items - from + 1) / 3)
  local base = redis.call('INCRBY', seq, n) - n
  local enq = stamp(now)
  local ids, at = first_ids(items, from, 3, out)
  if #ids == 0 then return 0, false, 0 end
  local old = bulk_read('HMGET', msgs, ids)
  local acked = ensure and window > 0 and bulk_read('ZMSCORE', done, ids) or {}
  local places, pushed, refused = {}, 0, 0
  local seqs = kseqs(base + 1)  -- the placed ones' seqs, in push order
  local expiry = K.expiry
  for m, id in ipairs(ids) do
    local add = true
    if old[m] then
      -- a plain push replaces it: the old copy leaves every state first (rare)
      if ensure then
        add = false
      else
        kdrop(K, id, old[m], conc)
        if expiry then redis.call('ZREM', expiry, id) end  -- the note of the one replaced
      end
    elseif acked[m] and tonumber(acked[m]) + window > now then
      add = false
      refused = refused + 1
    end
    if add then
      local i = at[m]
      local j = from + 3 * (i - 1)
      places[#places + 1] = id
      places[#places + 1] = items[j + 1]
      places[#places + 1] = items[j + 2]
      places[#places + 1] = enq
      places[#places + 1] = seqs()
      if expiry then note(expiry, id, items[j + 2], now) end
      out[i] = 1
      pushed = pushed + 1
    end
  end
  kplace(K, places, conc)
  return pushed, idle and pushed > 0, refused
end
