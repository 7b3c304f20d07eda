--[[ transaction-claim: hand the prepared messages of one shard that are due for a check to one
  checker, each for `claim ms` (fenced as a delivery is: transaction-settle-16.lua refuses the
  token once the claim ran out). A message whose checks are spent is buried instead
  (rolled back, kept with the dead letters: transaction unresolved).
  KEYS[1] delayed  KEYS[2] ready  KEYS[3] unack  KEYS[4] msgs  KEYS[5] dlv  KEYS[6] dead
  KEYS[7] seq  KEYS[8] counts  KEYS[9] half  KEYS[10] txs  KEYS[11] decided  KEYS[12] why
  KEYS[13] epoch
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] count (at most 1000)  ARGV[3] claim ms  ARGV[4] max checks
  ARGV[5] token base (a claim's token is "<base>:<n>")
  returns: {id, record, checks including this one, token} per claimed message, flat;
           or GONE
  uses: lib/bounds.lua lib/clock.lua lib/refusal.lua lib/transaction.lua
  flags: allow-oom
]]
local count, claim = int(ARGV[2], 1, MAX_CLAIM), int(ARGV[3], 1, MAX_MS)
local most = int(ARGV[4], 0, math.huge)
if not (#KEYS == 13 and #ARGV == 5 and count and claim and most) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', K.half, '-inf', now, 'LIMIT', 0, count)
local base = ARGV[5]
local out = {}
for i, id in ipairs(due) do
  local rec = redis.call('HGET', K.msgs, id)
  if not rec or elsewhere(K, id) then
    -- removed, or replaced by a plain push, while prepared: nothing left to decide
    redis.call('ZREM', K.half, id)
    redis.call('HDEL', K.txs, id)
  else
    local checks = tx_state(K.txs, id)
    if checks >= most then
      bury_half(K, id, now, checks)
    else
      local tok = base .. ':' .. i
      redis.call('HSET', K.txs, id, (checks + 1) .. '|' .. tok)
      redis.call('ZADD', K.half, now + claim, id)
      out[#out + 1] = id
      out[#out + 1] = rec
      out[#out + 1] = checks + 1
      out[#out + 1] = tok
    end
  end
end
return out
