--[[ lib/delivery: a delivery state, the `dlv` hash's value for an id:
  "<attempts>|<saved ready score>|<delivery token>". The saved score is the message's
  place in `ready`, so a message given back returns to its place; it is empty once the
  message must take a fresh place.
  delivery(d)  -> attempts (number), saved score (string, may be ''), token (string);
                  0, '', '' when there is no state
  attempts(d)  -> attempts only (0 when there is none)
  matches(d, tok) -> true when `tok` is '' (by id alone) or the state's current token
]]
local function delivery(d)
  if not d then return 0, '', '' end
  local a, score, tok = string.match(d, '^(%d*)|(%d*)|(.*)$')
  return tonumber(a) or 0, score, tok
end

local function attempts(d)
  if not d then return 0 end
  return tonumber(string.match(d, '^(%d+)')) or 0
end

-- A suffix compare, not a pattern, and no string made: this runs once per acked message.
-- A token never holds '|', so a '|' then tok at the end can only be the state's last field.
local function matches(d, tok)
  if tok == '' then return true end
  if not d or string.find(tok, '|', 1, true) then return false end
  local at = #d - #tok
  return at > 0 and string.byte(d, at) == 124 and string.find(d, tok, at + 1, true) == at + 1
end
