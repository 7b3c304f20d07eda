--[[ lib/bulk: variadic commands over lists of any length. Lua's unpack holds about 8,000
  values, so a longer list is sent in chunks (a script must never fail half-way).
  bulk(cmd, key, list)        redis.call(cmd, key, <list in chunks>) for a write with an
                              integer reply (ZADD, ZREM, HDEL...); returns their sum
  bulk_read(cmd, key, list)   the same for a read whose replies are concatenated (HMGET,
                              ZMSCORE): one reply per element, in order
  CHUNK  values per call (even, so score/member and field/value pairs stay whole)
]]
local CHUNK = 4000

local function bulk(cmd, key, list)
  local n = 0
  for i = 1, #list, CHUNK do
    n = n + redis.call(cmd, key, unpack(list, i, math.min(i + CHUNK - 1, #list)))
  end
  return n
end

local function bulk_read(cmd, key, list)
  if #list <= CHUNK then return redis.call(cmd, key, unpack(list)) end
  local out = {}
  for i = 1, #list, CHUNK do
    local part = redis.call(cmd, key, unpack(list, i, math.min(i + CHUNK - 1, #list)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
