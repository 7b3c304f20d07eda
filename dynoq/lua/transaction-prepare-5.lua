--[[ transaction-prepare: store a prepared (half) message: never delivered, peeked or counted as
  waiting until it is committed (lua/transaction-settle-16.lua); present for get, contains and
  push-if-absent (its record is in `msgs`).
  KEYS[1] msgs  KEYS[2] half  KEYS[3] txs  KEYS[4] decided  KEYS[5] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] delay ms (counted from the commit)  ARGV[4] priority
  ARGV[5] msgpack body  ARGV[6] check_after ms (when a checker may first ask about it)
  ARGV[7] a keyed queue's (ordered="key") message key, "" on any other: the record is
          then a keyed one (lib/keyed.lua) whose place in its key is taken at the commit
  returns: 1 prepared, 0 an id with this message is stored already (nothing changed),
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/record.lua lib/keyed.lua
  flags: none
]]
local delay, prio = int(ARGV[3], 0, MAX_MS), int(ARGV[4], 0, MAX_PRIORITY)
local after = int(ARGV[6], 0, MAX_MS)
if not (#KEYS == 5 and #ARGV == 7 and delay and prio and after) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local id, now = ARGV[2], now_ms()
local rec = stamp(now) .. ',' .. string.format('%d,%d,', delay, prio)
  .. (ARGV[7] ~= '' and kprepared(ARGV[7]) or '') .. ARGV[5]
if redis.call('HSETNX', K.msgs, id, rec) == 0 then return 0 end
redis.call('ZADD', K.half, now + after, id)
redis.call('HSET', K.txs, id, '0|')
-- a new transaction of an id used before: its old decisions are not this one's
redis.call('ZREM', K.decided, 'c:' .. id, 'r:' .. id)
return 1
