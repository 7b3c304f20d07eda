--[[ lib/bounds: what one call of a script may carry. Every script checks its call first,
  before any command, and refuses with BOUNDS (lib/refusal.lua), changing nothing, a call
  that carries more keys or arguments than one call of dynoq sends (the client splits
  longer work into several calls), a count or time outside its range, or text where a
  number goes: so that no call runs past ~50 ms whatever a role's user sends (DESIGN
  §2.14; the server is single-threaded: every tenant waits). Each check is O(1) per call.
  Walks over what keys hold are bounded where they are made (a count on every range).
  What the server spends before a script's first line, reading its arguments, no script
  can refuse (docs/security.md, Bounds).
  The maxima; each of those named after a constant of dynoq/_core is that constant (one
  number per decision: tests/test_bounds.py checks they agree); MAX_MEMBERS and
  MAX_FIELDS are the server's side alone:
  MAX_BATCH     messages one pop, peek or keyed ack-and-take claims, shows or carries;
                tasks' records one task-keep keeps (validate.py)
  PUSH_CHUNK    messages one push, push-batch or publish call carries (_core/bounds.py)
  IDS_CHUNK     ids one ack or replay call carries (_core/bounds.py)
  SWEEP_LIMIT   entries one requeue, promote, trim, replay or purge call handles, expired
                grants one rate-take frees (_core/bounds.py)
  EXPIRE_LIMIT  deliveries one krequeue call gives back, retries a kpop promotes
                (_core/keyed.py)
  MAX_CLAIM     prepared messages one claim hands out (_core/transactions.py)
  MAX_TARGETS   group queues one publish reaches (_core/topics.py)
  MAX_COPIES    copies one publish places, its messages times its group queues
                (_core/topics.py)
  CALL_SHARDS   shards one call reads or renews: a probe, a pop across shards, a sweeper's
                due, a lease renewal (_core/bounds.py)
  MAX_MEMBERS   members one heartbeat or reap reads, the longest silent first
  HISTORY_CAP   rebalances a group's history keeps (_core/group.py)
  MAX_FIELDS    settings one open stores
  MAX_TAGS, MAX_TAG_BYTES  tags of a subscription, bytes of one tag (128 characters);
                 MAX_FILTER_BYTES: a subscription's filter ("|a|b|", _core/topics.py)
  MAX_PRIORITY, MAX_KEY_CONCURRENCY, MAX_RETRIES, MAX_RATE  (validate.py, settings.py)
  MAX_FLOW, MAX_GROUP  steps (task calls, chains, groups) of one workflow, and members of
                one of its groups (_core/canvas.py MAX_NODES, MAX_MEMBERS)
  MAX_PROGRESS  bytes of one progress report a handler keeps (validate.py)
  MAX_WEIGHT, MAX_WEIGHTED  a key's fairness weight, the weighted keys of one shard
                (validate.py, lib/kweight.lua)
  MAX_RUNNING   a queue's max_running (settings.py)
  MAX_MS        the longest delay or timeout, 100 years (validate.MAX_SECONDS) in ms
  EXACT         2^53: any whole number a double holds exactly (times, batch ids)
  int(v, lo, hi) -> v as a number when it is a whole number in lo..hi, else nil (text,
                 nan, a fraction, nil)
  fits(n, base, step, most) -> true when n is base + step * k for a k in 0..most (a count
                 of KEYS or ARGV: a fixed part, then groups of `step`)
  uses: lib/refusal.lua
]]
local MAX_BATCH, PUSH_CHUNK, IDS_CHUNK, SWEEP_LIMIT = 1000, 500, 1000, 1000
local EXPIRE_LIMIT, MAX_CLAIM, MAX_TARGETS, MAX_COPIES = 500, 100, 1000, 2000
local CALL_SHARDS, MAX_MEMBERS, HISTORY_CAP, MAX_FIELDS = 256, 10000, 100, 64
local MAX_TAGS, MAX_TAG_BYTES = 64, 512
local MAX_FILTER_BYTES = 1 + MAX_TAGS * (MAX_TAG_BYTES + 1)  -- "|a|b|": a publish's filter
local MAX_PRIORITY, MAX_KEY_CONCURRENCY, MAX_RETRIES, MAX_RATE = 99, 1000, 1000000, 1000000000
local MAX_MS, EXACT = 3153600000000, 9007199254740992
local MAX_FLOW, MAX_GROUP, MAX_PROGRESS = 10100, 10000, 1024
local MAX_WEIGHT, MAX_WEIGHTED, MAX_RUNNING = 100, 10000, 1000000

local function int(v, lo, hi)
  local n = tonumber(v)
  if n and n >= lo and n <= hi and n == math.floor(n) then return n end
  return nil
end

local function fits(n, base, step, most)
  if step == 0 then return n == base end
  local k = (n - base) / step
  return k >= 0 and k <= most and k == math.floor(k)
end
