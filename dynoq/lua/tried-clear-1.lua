--[[ tried-clear: forget what the attempts of a Spark write task pushed to one shard, once
  Spark counted the task as succeeded (push-batch-14.lua's `tried`): no retry of it will
  come, and the record would otherwise hold the partition's ids until it expires.
  KEYS[1] tried    hash of the task on this shard: id -> the attempt that pushed it
  returns: 1 if there was a record, 0 if not
  uses: lib/bounds.lua
  flags: allow-oom
]]
if not (#KEYS == 1 and #ARGV == 0) then return BOUNDS end
return redis.call('UNLINK', K.tried)
