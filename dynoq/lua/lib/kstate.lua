--[[ lib/kstate: a message-group key's state, a value of a keyed shard's `kstate` hash
  (lib/keyed.lua): "<in flight>|<waiting>|<#last>|<#head>|<last><head><tail>".
  kunpack(v) -> {in flight, waiting, last delivered id, head, tail}; {0, 0, '', '', ''}
                for none (or a value not written by dynoq)
  kpack(s)   -> the value of such a state (no head or tail when nothing waits)
  kcount(v)  -> in flight, waiting, and the value from its waiting count on: what an
                ack changes (the in-flight count alone) without the ids cut out and
                joined again (0, 0, '' where kunpack gives none); krecount(f, rest) ->
                that value with f in flight
  uses: lib/knum.lua
]]
local function kunpack(v)
  if v then
    local f, w, a, b, at = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|()')
    if f then
      a, b = knum(a), knum(b)
      return {knum(f), knum(w), string.sub(v, at, at + a - 1),
              string.sub(v, at + a, at + a + b - 1), string.sub(v, at + a + b)}
    end
  end
  return {0, 0, '', '', ''}
end

local function kcount(v)
  if v then
    local f, w = string.match(v, '^(%d+)|(%d+)|%d+|%d+|')
    if f then return knum(f), knum(w), string.sub(v, #f + 2) end
  end
  return 0, 0, ''
end

local function krecount(f, rest)
  return kn(math.max(f, 0)) .. '|' .. rest
end

local function kpack(s)
  if s[2] <= 0 then s[4], s[5] = '', '' end  -- nothing waits: no chain
  return kn(math.max(s[1], 0)) .. '|' .. kn(math.max(s[2], 0)) .. '|' .. kn(#s[3]) .. '|'
    .. kn(#s[4]) .. '|' .. s[3] .. s[4] .. s[5]
end
