--[[ lib/kstate: a message-group key's state, a value of a keyed shard's `kstate` hash
  (lib/keyed.lua writes it): "<in flight>|<waiting>|<#last>|<#head>|<last><head><tail>".
  kunpack(v) -> {in flight, waiting, last delivered id, head, tail}; {0, 0, '', '', ''}
                for none (or a value not written by dynoq)
]]
local function kunpack(v)
  if v then
    local f, w, a, b, at = string.match(v, '^(%d+)|(%d+)|(%d+)|(%d+)|()')
    if f then
      a, b = tonumber(a), tonumber(b)
      return {tonumber(f), tonumber(w), string.sub(v, at, at + a - 1),
              string.sub(v, at + a, at + a + b - 1), string.sub(v, at + a + b)}
    end
  end
  return {0, 0, '', '', ''}
end
