--[[ pop: claim up to `count` messages of one shard for a visibility timeout.
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs
  KEYS[5] dlv      KEYS[6] dead   KEYS[7] seq    KEYS[8] lease
  KEYS[9] why      KEYS[10] counts  KEYS[11] epoch  KEYS[12] control  KEYS[13] expiry
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] count    ARGV[3] visibility timeout ms
  ARGV[4] nonce (random per call; with the attempt number it makes the delivery token)
  ARGV[5] "1" for an ordered queue (one batch in flight per shard, retries block it)
  ARGV[6] the caller's value of the lease ("" = none)   ARGV[7] max retries
  ARGV[8] wake channel (PUBLISHed when expired deliveries were given back)
  ARGV[9] lease margin ms: with a lease value, a lease with less time left than this is
          treated as gone (the caller could not finish the batch before it ends)
  ARGV[10] ceiling: claim only messages of this priority or a lower value (99: any). The
          caller passes the best priority any shard of the queue holds, so that a pop
          across shards takes the lower values first (see Planner.look, _core/popping.py)
  KEYS[14..] repeated ready delayed unack: optional, other shards of the queue (one server
  only: their keys are in other slots), three keys a shard; then the ceiling is also at
  most the lowest priority they may deliver (lib/rank.lua), and the reply ends with their
  ranks, one a shard, in that order. (Their epochs are not checked: only read, and a shard
  that is gone has nothing to deliver.)
  returns: {1, rest, score, id, record, attempts, ...}  claimed messages. A first
           delivery (attempts 1) has no delivery state and its token is `score`, the
           batch's `unack` score (lib/delivery.lua; on an ordered queue the batch's
           places are kept for a retry in place and a takeover, lib/batch.lua); any
           other delivery's token is "<nonce>.<attempts>", so the caller makes it from
           the nonce it sent
           {0, hint, rest}  nothing claimed; hint = ms until something may be
           deliverable (-1 = unknown), there or in the other shards named
           rest: what the shard still holds ready: 0 nothing, 1 + p its next message's
           priority p (above the ceiling), -1 not looked at (the batch was full)
           {0, -1, 0, 0...}  the queue is paused (`paused` exists, lua/pause-2.lua): what
           an empty queue replies, so that its consumers wait as they would there
           GONE, FENCED or LEASED (lib/refusal.lua)
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/delivery.lua lib/expire.lua lib/promote.lua
        lib/pin.lua lib/batch.lua lib/record.lua lib/rank.lua lib/hint.lua
        lib/paused.lua lib/bulk.lua lib/control.lua lib/lapse.lua lib/debounce.lua
  flags: allow-oom
]]
local count, vis, nonce = int(ARGV[2], 1, MAX_BATCH), int(ARGV[3], 1, MAX_MS), ARGV[4]
local ordered, token, max_retries = ARGV[5] == '1', ARGV[6], int(ARGV[7], 0, MAX_RETRIES)
-- The ceiling only bounds a compare: a rank from a priority above 99 (stored by hand) is
-- taken as it is, not refused.
local margin, ceiling = int(ARGV[9], 0, MAX_MS), int(ARGV[10], 0, math.huge)
if not (fits(#KEYS, 13, 3, CALL_SHARDS - 1) and #ARGV == 10 and count and vis and max_retries
        and margin and ceiling) then
  return BOUNDS
end

local refused = gone(K.epoch, ARGV[1]) or fenced(K.lease, token)
if refused then return refused end
if token ~= '' and redis.call('PTTL', K.lease) < margin then return FENCED end
if ordered and token == '' and redis.call('EXISTS', K.lease) == 1 then return LEASED end
local now = now_ms()

-- Deliveries whose visibility ran out go back (or to the dead set): bounded work.
local back = give_back(K, now, now, 100, max_retries)
if back > 0 then redis.call('PUBLISH', ARGV[8], '1') end
-- What was pushed with an expiry and not delivered by then: to the dead letters.
local expiring = redis.call('EXISTS', K.expiry) == 1
if expiring then lapse(K, now, LAPSE_LIMIT) end

-- Promote what is due (a message given back keeps its saved place); on an ordered
-- shard, debounced messages that fell due go last (lib/debounce.lua).
promote(K.delayed, K.ready, K.msgs, K.dlv, K.seq, now, 5000)
if ordered then dplace(K, now, 500) end

if paused(K.control) then return idle_reply(GROUPS) end

-- The other shards named, if any: what they may deliver bounds what this pop claims.
local others, later = {}, -1
for g = 1, GROUPS do
  local k = group_keys(g)
  local r, ms = rank_of(k.ready, k.delayed, k.unack, now)
  others[#others + 1] = r
  if r > 0 and r - 1 < ceiling then ceiling = r - 1 end
  if ms >= 0 and (later < 0 or ms < later) then later = ms end
end

local function reply(out)  -- with the other shards' ranks at the end
  for _, r in ipairs(others) do out[#out + 1] = r end
  return out
end

-- An ordered shard delivers nothing while a message is in flight or waits for a retry
-- (the debounced ones held in `delayed` score above every retry).
if ordered and (live(K.unack) > 0 or redis.call('ZCOUNT', K.delayed, '-inf', RETRIES) > 0) then
  return reply({0, wait_hint(K.delayed, K.unack, now, later), 0})
end
local popped = redis.call('ZPOPMIN', K.ready, count)
-- Fewer than asked: ready is empty now. (Known for free: no command asks.)
local rest = #popped < 2 * count and 0 or -1
if ceiling < 99 and #popped > 0 and rank(popped[#popped]) > ceiling + 1 then
  -- Some are above the ceiling (rare: priorities differ between shards): put them back
  -- with their scores (the strings ZPOPMIN gave, exact) and say what the shard holds.
  local cut = 1
  while rank(popped[cut + 1]) <= ceiling + 1 do cut = cut + 2 end
  rest = rank(popped[cut + 1])
  local back = {}
  for i = cut, #popped, 2 do
    back[#back + 1] = popped[i + 1]
    back[#back + 1] = popped[i]
    popped[i], popped[i + 1] = nil, nil
  end
  bulk('ZADD', K.ready, back)
end
if #popped == 0 then return reply({0, wait_hint(K.delayed, K.unack, now, later), rest}) end
local ids = {}
for i = 1, #popped, 2 do ids[#ids + 1] = popped[i] end
local recs = bulk_read('HMGET', K.msgs, ids)
-- No delivery states but the pin: nothing to read for first deliveries.
local dlvs = held(K.dlv) and bulk_read('HMGET', K.dlv, ids) or {}
-- One deadline string for the batch: a number argument is formatted again per message.
-- The first deliveries share a deadline with a random fraction, their token
-- (lib/delivery.lua).
local due = deadline(now + vis, nonce)
local out, unacks, states, fresh = {1, rest, due}, {'+inf', PIN}, {PIN, ''}, {}
-- Per message (a hot loop): at most one string made and the tables filled by counters,
-- not by their length. A concurrent queue takes no saved place (an expired delivery goes
-- to the back of its priority, as Dyno's processUnacks puts it back at its deadline); an
-- ordered one keeps the `ready` score each message was popped with.
local o, u, st, fmt = 3, 2, 2, string.format
for k, id in ipairs(ids) do
  local rec = recs[k]
  if rec then
    local d = dlvs[k]
    local n = attempts(d) + 1
    if n == 1 then
      -- Given back unhandled ("0|..."): this delivery is a first one again, stateless.
      if d then fresh[#fresh + 1] = id end
    elseif not ordered then
      states[st + 1], states[st + 2] = id, fmt('%d||%s.%d', n, nonce, n)
      st = st + 2
    else
      states[st + 1], states[st + 2] = id, fmt('%d|%d|%s.%d', n, tonumber(popped[2 * k]), nonce, n)
      st = st + 2
    end
    unacks[u + 1], unacks[u + 2] = due, id
    out[o + 1], out[o + 2], out[o + 3] = id, rec, n
    o, u = o + 3, u + 2
  end
end
bulk('ZADD', K.unack, unacks)
if expiring then delivered(K.expiry, ids) end  -- delivered: an expiry no longer applies
if st > 2 then bulk('HSET', K.dlv, states) end
if ordered then keep_places(K.dlv, popped) end  -- with the pin, if none was
if #fresh > 0 then bulk('HDEL', K.dlv, fresh) end
return reply(out)
