--[[ lib/lapse: a message pushed with an expiry (push(..., expires=s)) that is not
  delivered by then is dead-lettered (why "l", lib/why.lua) and counted (`lapsed`, and
  `dead` as every dead letter). Its body starts with "e<ms>," (codec.py writes it after
  the record's header), and a push notes its deadline in the shard's `expiry` zset (id ->
  deadline ms); the pop that delivers it takes the note out, so an id the zset holds at its
  deadline still waits: a pop lapses what is due before it claims (at most LAPSE_LIMIT a
  call), the sweeper the rest.
  uses: lib/bulk.lua lib/why.lua
  note(expiry, id, body, now) -> notes `body`'s deadline, when it carries one (the push
    that replaces a message drops the note of the one it replaces first)
  delivered(expiry, ids) -> drops the notes of `ids` (the caller knows the zset exists:
    one EXISTS a pop, none a push); taken(expiry, out, from): of the ids lib/ktake.lua
    put in `out` from index `from` on (id, record, attempts, fence each)
  lapsed(counts, n) -> counts n messages lapsed (and dead)
  due_lapses(expiry, now, limit) -> ids whose deadline passed (at most limit), notes dropped,
    and whether more may remain
  lapse(K, now, limit) -> dead-letters the due ones that wait in `ready` or `delayed`;
    returns how many, and whether more may remain (a pop calls it only when the zset
    exists: one EXISTS, whose answer it keeps for `delivered`)
  LAPSE_LIMIT  notes one pop looks at
]]
local LAPSE_LIMIT = 500

local function note(expiry, id, body, now)
  if string.byte(body, 1) == 101 then  -- "e": it carries an expiry
    local ms = tonumber(string.match(body, '^e(%d+),'))
    if ms then redis.call('ZADD', expiry, now + ms, id) end
  end
end

local function delivered(expiry, ids)
  if #ids > 0 then bulk('ZREM', expiry, ids) end
end

local function lapsed(counts, n)
  if n > 0 then
    redis.call('HINCRBY', counts, 'lapsed', n)
    redis.call('HINCRBY', counts, 'dead', n)
  end
end

local function taken(expiry, out, from)
  local ids = {}
  for i = from, #out, 4 do ids[#ids + 1] = out[i] end
  delivered(expiry, ids)
end

local function due_lapses(expiry, now, limit)
  local ids = redis.call('ZRANGEBYSCORE', expiry, '-inf', now, 'LIMIT', 0, limit)
  if #ids > 0 then bulk('ZREM', expiry, ids) end
  return ids, #ids == limit
end

local function lapse(K, now, limit)
  local ids, more = due_lapses(K.expiry, now, limit)
  local n = 0
  for _, id in ipairs(ids) do
    if redis.call('ZREM', K.ready, id) + redis.call('ZREM', K.delayed, id) > 0 then
      redis.call('ZADD', K.dead, now, id)
      record_why(K.why, id, now, 'l', '')
      n = n + 1
    end
  end
  lapsed(K.counts, n)
  return n, more
end
