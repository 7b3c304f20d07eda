--[[ batch-commit: record that a streaming query committed a micro-batch on one shard, and
  forget the ids the batch handled (a replay of it is now refused whole by push-batch).
  KEYS[1] commit   hash: committed = highest committed batch id, batch = batch of `wrote`
  KEYS[2] wrote    set of the ids the uncommitted batch handled
  ARGV[1] batch id (>= 0)
  ARGV[2] retention of the query's keys in ms
  returns: 1 if recorded now, 0 if that batch (or a later one) was already committed
  uses: lib/bounds.lua
  flags: allow-oom
]]
local batch, keep = int(ARGV[1], 0, EXACT), int(ARGV[2], 1, MAX_MS)
if not (#KEYS == 2 and #ARGV == 2 and batch and keep) then return BOUNDS end
local state = redis.call('HMGET', K.commit, 'committed', 'batch')
local fresh = batch > (tonumber(state[1]) or -1)
if fresh then redis.call('HSET', K.commit, 'committed', batch) end
local current = tonumber(state[2])
if current == nil or current <= batch then
  redis.call('UNLINK', K.wrote)
  redis.call('HDEL', K.commit, 'batch')
end
redis.call('PEXPIRE', K.commit, keep)
return fresh and 1 or 0
