--[[ flow-cancel: stop a running flow: nothing of it starts any more (lib/flow.lua's walk
  says so to every call that ends after this), and its state is kept for `keep` ms.
  KEYS[1] plan  KEYS[2] flow
  ARGV none
  returns: 1 cancelled now, 0 it was not running (ended, cancelled, or unknown)
  uses: lib/bounds.lua lib/flow.lua
  flags: allow-oom
]]
if #KEYS ~= 2 or #ARGV ~= 0 then return BOUNDS end
if redis.call('HGET', K.flow, 'status') ~= 'running' then return 0 end
flow_end(K.plan, K.flow, 'cancelled', 'cancelled', '1')
return 1
