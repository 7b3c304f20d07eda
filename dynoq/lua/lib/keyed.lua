--[[ lib/keyed: message groups (ordered="key", DESIGN §3.5): order per key, no
  head-of-line blocking. A keyed shard's keys (this header is their reference) and a keyed
  message's record. The steps are pieces of their own, each script taking only those it
  runs: lib/kstate.lua (a key's state), lib/kstore.lua (states read and written back,
  keys' turns), lib/klinks.lua (the chains of kwait; a message given back at the head of
  its key), lib/kdrop.lua (a removal), lib/kexpire.lua (expired deliveries, due retries),
  lib/kplace.lua (new messages last in their keys), lib/ktake.lua (a pop),
  lib/kadd.lua (which of a push's messages go in), lib/knum.lua (numbers as text).
  uses: lib/knum.lua

  A keyed shard keeps, besides msgs/unack/dlv/delayed/dead/why of every queue:
  kwait   hash id -> "<#prev>|<prev><next>" for every waiting message: each key's waiting
          messages are a chain in push order (#prev: the byte length of the previous id;
          "" at either end), its ends in `kstate`. Every step is O(1) hash work at any
          number of keys: a pop unlinks a key's head, a push links a new tail, a removal
          joins its neighbours. A message given back (expired, retry due) goes back before
          the first waiting message of its key with a higher seq: a walk from the head of
          at most key_concurrency steps (only given-back messages can precede it). The
          head's <prev> is not kept up to date (nothing reads it). HLEN = waiting messages.
  kturn   zset key -> turn: the keys that may deliver now (waiting messages and fewer than
          key_concurrency in flight). A pop takes the lowest turn and, if the key may
          deliver more, gives it a new turn from the shard's `seq` (behind every key
          already waiting: round-robin). Keys given back (expired, retry due) take turn 0.
          Every script keeps it whole: a key that waits with a free slot has a turn, so
          a push gives one only to a key that had no message waiting before it.
  kstate  hash key -> "<in flight>|<waiting>|<#last>|<#head>|<last><head><tail>" for every
          key with messages waiting or in flight (HLEN = the shard's keys): last, the last
          delivered id; head and tail, the ends of its chain in kwait ("" when none waits).
          Ids may hold any byte, so they are cut by their lengths; the key is the field,
          never parsed. A message waiting for its retry (in `delayed`) still holds its
          key's slot: the key is blocked.
  kfence  hash key -> fence, only once a key was taken over (an expired delivery given
          back); absent = 1. Kept when the key drains, so a fence never goes back.
  The record of a keyed message: "<enq>,0,0,K<len>:<key><seq>" + msgpack body (the body
  holds no key: codec.decode reads it from here), so any script finds a message's key and
  its seq from its id alone. Every walk of a chain is bounded, and a step to a link that
  is missing (a chain broken by hand) ends the key's chain: the state is mended (nothing
  waits), the key moves on.

  K, the steps' first argument: a table of the shard's keys by name (msgs, kwait, kturn,
     kstate, kfence, seq, unack, dlv, delayed, dead, why, done): a script's own `K`
     (dynoq/_core/lua.py), whose header names them
  kprefix(key) -> "<len>:<key>", the key as a record's header holds it
  kparse(rec) -> key, seq of a keyed record (nil when it is not one); kkey(rec) -> its
    key alone (the steps that only free or check a key's slot: no seq string made)
  kprepared(key) -> the header of a prepared (transactional) keyed record: its seq is
    kseq(0), which no placed message has; kreplaced(rec) -> true when a record has a place
    (a push replaced the prepared one); kbody(rec) -> the msgpack body after the header
]]
local function kprefix(key)
  return kn(#key) .. ':' .. key
end

-- The end of a keyed record's header before its key, the key's length and the seq's
-- (nil when it is not one): kparse's and kkey's one reading of it.
local function khead(rec)
  local _, e, n = string.find(rec or '', '^%w+,%d+,%d+,K(%d+):')
  if not e then return nil end
  n = knum(n)
  local len = (string.byte(rec, e + n + 1) or 0) - 96
  if len < 1 then return nil end  -- a header cut short (not written by dynoq)
  return e, n, len
end

local function kparse(rec)
  local e, n, len = khead(rec)
  if not e then return nil end
  return string.sub(rec, e + 1, e + n), string.sub(rec, e + n + 1, e + n + 1 + len)
end

local function kkey(rec)
  local e, n = khead(rec)
  if not e then return nil end
  return string.sub(rec, e + 1, e + n)
end

local function kprepared(key)
  return 'K' .. kprefix(key) .. kseq(0)
end

local function kreplaced(rec)
  local _, seq = kparse(rec)
  return seq ~= nil and seq ~= kseq(0)
end

local function kbody(rec)
  local _, e, n = string.find(rec, '^%w+,%d+,%d+,K(%d+):')
  local at = e + tonumber(n) + 1
  return string.sub(rec, at + 1 + string.byte(rec, at) - 96)
end
