--[[ lib/klinks: the chains of a keyed shard's `kwait` (lib/keyed.lua): each key's waiting
  messages in push order, a link "<#prev>|<prev><next>" per message ("" at either end),
  the ends in the key's state.
  uses: lib/knum.lua lib/keyed.lua lib/kstore.lua
  lsplit(v) -> prev, next of a link ('', '' for one not written by dynoq); lnext(v) ->
    its next alone (a pop's unlinking of a head, whose prev is not kept)
  lpack(prev, next) -> the link
  lset(kwait, id, which, to) sets one end of id's link (which: 1 prev, 2 next); a missing
    link stays missing
  kback(K, key, id, seq, conc) -> a delivery of `key` given back (expired, retry due, a
    retry without delay): its slot freed, it is linked before the first waiting message
    of its key with a higher seq, and the key takes turn 0 (it goes first)
]]
-- Where a link's ids start and its prev's length: lsplit's and lnext's one reading
local function lcut(v)
  local n, at = string.match(v, '^(%d+)|()')
  if not n then return nil end
  return at, knum(n)
end

local function lsplit(v)
  local at, n = lcut(v)
  if not at then return '', '' end
  return string.sub(v, at, at + n - 1), string.sub(v, at + n)
end

local function lnext(v)
  local at, n = lcut(v)
  if not at then return '' end
  return string.sub(v, at + n)
end

local function lpack(prev, nxt)
  return kn(#prev) .. '|' .. prev .. nxt
end

local function lset(kwait, id, which, to)
  local v = redis.call('HGET', kwait, id)
  if not v then return end
  local p, n = lsplit(v)
  if which == 1 then p = to else n = to end
  redis.call('HSET', kwait, id, lpack(p, n))
end

local function kback(K, key, id, seq, conc)
  local kwait, msgs = K.kwait, K.msgs
  local s = kget(K, key)
  s[1] = s[1] - 1
  local prev, cur = '', (s[2] > 0 and s[4] or '')
  -- Only given-back messages can precede it: with it, they and those in flight (s[1], it
  -- no longer counted) are at most conc. With conc 1 it goes first, nothing read.
  for _ = 1, conc - 1 - s[1] do
    if cur == '' then break end
    local _, cs = kparse(redis.call('HGET', msgs, cur))
    if not cs or cs > seq then break end
    local v = redis.call('HGET', kwait, cur)
    if not v then break end
    prev = cur
    local _, n = lsplit(v)
    cur = n
  end
  redis.call('HSET', kwait, id, lpack(prev, cur))
  if prev == '' then s[4] = id else lset(kwait, prev, 2, id) end
  if cur == '' then s[5] = id else lset(kwait, cur, 1, id) end
  s[2] = s[2] + 1
  kput(K, key, s, conc, 0)
end
