--[[ lib/acks: the deliveries an ack names, from ARGV[from] on: a token T, a count n, n
  ids delivered under T, then pairs: id, token ("" = by id alone: whatever delivery is
  current). A pop's first deliveries share one token (their batch's `unack` score,
  lib/delivery.lua), so an ack of a batch names it once, not once a message: one
  argument a message fewer to send and to read.
  acks(from, most) -> ids, tokens (one each a delivery, in order); nil when the arguments
                      from `from` on are not that shape or name more than `most`
  uses: lib/bounds.lua
]]
local function acks(from, most)
  local n = int(ARGV[from + 1], 0, most)
  if not n then return nil end
  local pairs_at = from + 2 + n
  local rest = #ARGV - pairs_at + 1
  if rest < 0 or rest % 2 ~= 0 or n + rest / 2 > most then return nil end
  local ids, toks, shared = {}, {}, ARGV[from]
  for j = from + 2, pairs_at - 1 do
    ids[#ids + 1] = ARGV[j]
    toks[#toks + 1] = shared
  end
  for j = pairs_at, #ARGV, 2 do
    ids[#ids + 1] = ARGV[j]
    toks[#toks + 1] = ARGV[j + 1]
  end
  return ids, toks
end
