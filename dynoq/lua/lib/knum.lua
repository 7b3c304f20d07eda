--[[ lib/knum: numbers as text on a keyed shard (lib/keyed.lua): counts in its states and
  links, and the seqs that give each message its place in its key.
  kn(n) -> n as text, formatted once a call for each n; knum(s) -> the number of a
    count's text (digits), converted once a call for each text
  kseq(n) -> n as a string that sorts as the number: a letter for its length, base 36
  kseqs(first) -> a function returning kseq(first), kseq(first + 1), ... one a call
  uses: lib/record.lua
]]
-- A count as text, each written once a call: Lua formats a number with sprintf, which
-- cost more than the rest of a push's Lua together (the same lengths and counts recur).
local KN = {}
local function kn(n)
  local t = KN[n]
  if not t then
    t = string.format('%d', n)
    KN[n] = t
  end
  return t
end

-- Back the other way: tonumber is a strtod, and a keyed pop reads half a dozen counts a
-- message (a state's four, a link's, a record's key length), the same few texts again.
local NK = {}
local function knum(s)
  local n = NK[s]
  if not n then
    n = tonumber(s)
    NK[s] = n
  end
  return n
end

local function kseq(n)
  local s = stamp(n)
  return string.char(96 + #s) .. s
end

-- Successive seqs from `first` on (kseq's form), one string each: a push places hundreds
-- of messages, and counting the digits up in place costs less than converting each number.
local function kseqs(first)
  local d = {string.byte(stamp(first), 1, -1)}  -- base 36 digits, as byte codes
  local n = #d
  return function()
    local out = string.char(96 + n, unpack(d))
    local i = n
    while true do  -- add one, carrying: '9' -> 'a', 'z' -> '0' and on to the next digit
      local c = d[i]
      if c == 57 then d[i] = 97 break
      elseif c ~= 122 then d[i] = c + 1 break end
      d[i] = 48
      i = i - 1
      if i == 0 then table.insert(d, 1, 49) n = n + 1 break end
    end
    return out
  end
end
