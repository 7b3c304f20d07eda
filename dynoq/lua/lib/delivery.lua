--[[ lib/delivery: a delivery state, the `dlv` hash's value for an id:
  "<attempts>|<saved ready score>|<delivery token>". The saved score is the message's
  place in `ready`, so a message given back returns to its place; it is empty once the
  message must take a fresh place.
  A first delivery has no state (pop-13.lua; lib/ktake.lua on a keyed shard): writing one
  was a third of the server time of a pop and its ack (benchmarks/RESULTS.md); on an
  ordered shard the places of the batch in flight are kept apart, in one string
  (lib/batch.lua). Its token is its
  `unack` score, the deadline plus a random fraction of a millisecond (`deadline()`), so
  a stale token (of an earlier delivery of the same id, acked, removed or replaced, then
  pushed and popped again) does not match it; a state is written the moment it is needed
  (given back, dead-lettered, extended).
  delivery(d)  -> attempts (number), saved score (string, may be ''), token (string);
                  0, '', '' when there is no state
  in_flight(d) -> the same for a delivery in `unack`: with no state, its first (1, '', '')
  attempts(d)  -> attempts only (0 when there is none)
  matches(d, tok, score) -> true when `tok` is '' (by id alone), the state's current
                  token, or (no state) the delivery's `unack` score `score`
  deadline(ms, nonce) -> the `unack` score of a stateless delivery due at `ms`: the
                  fraction k/2048 (k from the nonce's last three hex digits) is exact in a
                  double until 2^42 ms (the year 2109), and is the token's randomness
  token_of(score) -> the token of a stateless delivery from its `unack` score as ZSCORE
                  gives it (the string pop-13.lua returned: the same format of the same
                  double)
]]
local function delivery(d)
  if not d then return 0, '', '' end
  local a, score, tok = string.match(d, '^(%d*)|(%d*)|(.*)$')
  return tonumber(a) or 0, score, tok
end

local function in_flight(d)
  if not d then return 1, '', '' end
  return delivery(d)
end

local function attempts(d)
  if not d then return 0 end
  return tonumber(string.match(d, '^(%d+)')) or 0
end

-- A suffix compare, not a pattern, and no string made: this runs once per acked message.
-- A token never holds '|', so a '|' then tok at the end can only be the state's last field.
local function matches(d, tok, score)
  if tok == '' then return true end
  -- Equal strings first (one compare: the server formats a score as pop-13.lua did).
  if not d then return tok == score or (score ~= nil and tonumber(tok) == tonumber(score)) end
  if string.find(tok, '|', 1, true) then return false end
  local at = #d - #tok
  return at > 0 and string.byte(d, at) == 124 and string.find(d, tok, at + 1, true) == at + 1
end

local function deadline(ms, nonce)
  return string.format('%.17g', ms + (tonumber(string.sub(nonce, -3), 16) or 0) % 2048 / 2048)
end

local function token_of(score)
  return string.format('%.17g', tonumber(score))
end
