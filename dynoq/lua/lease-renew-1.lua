--[[ lease-renew: extend the caller's leases on shards if it still holds them.
  KEYS[1] lease  (repeated: one per shard; on Redis Cluster one shard a call)
  ARGV[1] owner token  ARGV[2] lifetime ms
  returns: one flag per lease, in KEYS order: 1 renewed, 0 gone or held by another owner
  flags: allow-oom
]]
local out = {}
for i, lease in ipairs(KEYS) do
  if redis.call('GET', lease) == ARGV[1] then
    out[i] = redis.call('PEXPIRE', lease, ARGV[2])
  else
    out[i] = 0
  end
end
return out
