--[[ lease-renew: extend the caller's leases on shards if it still holds them, each in
  the tenure it knows (lease-acquire: the value is "<token>.<fence>").
  KEYS[1] lease
  KEYS[1..] repeated: one per shard; on Redis Cluster one shard a call
  ARGV[1] lifetime ms  ARGV[1 + g] the caller's value of the lease of group g
  returns: one flag per lease, in KEYS order: 1 renewed, 0 gone, held by another owner,
           or taken again since (another tenure)
  uses: lib/bounds.lua
  flags: allow-oom
]]
if not (fits(#KEYS, 1, 1, CALL_SHARDS - 1) and #ARGV == #KEYS + 1
        and int(ARGV[1], 1, MAX_MS)) then
  return BOUNDS
end
local out = {}
for g = 1, GROUPS do
  local lease = group_keys(g).lease
  if redis.call('GET', lease) == ARGV[g + 1] then
    out[g] = redis.call('PEXPIRE', lease, ARGV[1])
  else
    out[g] = 0
  end
end
return out
