--[[ lib/clock: the server's clock, the only clock dynoq trusts (producers and consumers
  on other hosts may disagree by seconds).
  now_ms() -> milliseconds since the epoch, from TIME
]]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
