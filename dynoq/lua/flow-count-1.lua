--[[ flow-count: count a flow's start or end under a prefix (dynoq/_core/flows.py): what
  Prometheus reads as dynoq_flows_total (dynoq/metrics.py). Sent by the process that
  started or ended the flow, after: one that dies in between misses one count.
  KEYS[1] flows
  ARGV[1] started, succeeded, failed or cancelled
  returns: the new count
  uses: lib/bounds.lua
  flags: allow-oom
]]
local what = ARGV[1]
if not (#KEYS == 1 and #ARGV == 1 and (what == 'started' or what == 'succeeded'
        or what == 'failed' or what == 'cancelled')) then
  return BOUNDS
end
return redis.call('HINCRBY', K.flows, what, 1)
