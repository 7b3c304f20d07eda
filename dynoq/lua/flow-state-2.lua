--[[ flow-state: what a flow's handle reads: its status, how many calls it makes and how
  many ended, its result once it succeeded, its first failure's marker once it failed.
  KEYS[1] plan  KEYS[2] flow
  ARGV none
  returns: {status, leaves, ended, result, failure} ({false, ...} for a flow unknown:
           expired, or never was)
  uses: lib/bounds.lua
  flags: no-writes
]]
if #KEYS ~= 2 or #ARGV ~= 0 then return BOUNDS end
return redis.call('HMGET', K.flow, 'status', 'leaves', 'ended', 'result', 'failure')
