--[[ lease-renew: extend the caller's leases on shards if it still holds them, each in
  the tenure it knows (lease-acquire: the value is "<token>.<fence>").
  KEYS[1] lease  (repeated: one per shard; on Redis Cluster one shard a call)
  ARGV[1] lifetime ms  ARGV[1 + i] the caller's value of KEYS[i]
  returns: one flag per lease, in KEYS order: 1 renewed, 0 gone, held by another owner,
           or taken again since (another tenure)
  flags: allow-oom
]]
local out = {}
for i, lease in ipairs(KEYS) do
  if redis.call('GET', lease) == ARGV[i + 1] then
    out[i] = redis.call('PEXPIRE', lease, ARGV[1])
  else
    out[i] = 0
  end
end
return out
