--[[ lib/record: the header the scripts put in front of a record's msgpack body:
  "<enqueued ms, base 36>,<due offset ms>,<priority>," (base 36 keeps the timestamp to
  8 characters, not 13: a header is stored once per message). A header of 12 or more
  digits is decimal: records written before base 36 read as they were written.
  stamp(now)        -> the enqueued field for `now` (ms)
  times(rec)        -> enqueued ms, due offset ms (numbers); nil when rec has no header
  priority(rec)     -> the priority (0 when rec has no header)
  retimed(rec, due) -> rec with its due offset set so that it is due at `due` (ms)
  restamped(rec, now) -> rec enqueued at `now`, its due offset kept
  PRIO              2^46: a ready score is priority * PRIO + the shard's ready sequence
                    (priority 0..99 and a sequence below 2^46 keep every score exact in a
                    double, 2^53)
  rank(score)       -> 1 + the priority of a ready score (a pop's and probe's replies say
                    what a shard holds this way: 0 is "nothing")
]]
local PRIO = 70368744177664

local function rank(score)
  return 1 + math.floor(tonumber(score) / PRIO)
end

local function stamp(now)  -- digits as byte codes, least significant first: no string per digit
  local b, i, n = {}, 0, now
  repeat
    local d = n % 36
    i = i + 1
    b[i] = d < 10 and 48 + d or 87 + d  -- '0'..'9', 'a'..'z'
    n = (n - d) / 36
  until n == 0
  return string.reverse(string.char(unpack(b)))
end

local function enq_ms(field)
  return #field >= 12 and tonumber(field) or tonumber(field, 36)
end

local function times(rec)
  local enq, off = string.match(rec or '', '^(%w+),(%d+),')
  if not enq then return nil end
  return enq_ms(enq), tonumber(off)
end

local function priority(rec)
  return tonumber(string.match(rec or '', '^%w+,%d+,(%d+),')) or 0
end

local function retimed(rec, due)
  local enq, rest = string.match(rec, '^(%w+),%d+,(.*)$')
  return enq .. ',' .. string.format('%d', due - enq_ms(enq)) .. ',' .. rest
end

-- rec with its enqueued field set to `now`, its due offset kept: a transaction's commit
-- (lua/transaction-settle-16.lua) enqueues the prepared message then, and its delay counts from then
local function restamped(rec, now)
  return stamp(now) .. string.match(rec, '^%w+(,.*)$')
end
