--[[ flow-advance: one of a flow's calls ended (dynoq/_core/flows.py): record its value, or
  its failure marker when it was dead-lettered, walk its path up (lib/flow.lua) and say
  what starts next. Each end is recorded once, so a call run again (a duplicate
  delivery, a worker killed before its ack) walks the same path with the first run's
  value, counts nothing twice, and is told the same next step, which its push makes
  once (flow-push).
  KEYS[1] plan  KEYS[2] flow
  ARGV[1] leaf id  ARGV[2] its value, or its failure marker (msgpack)
  ARGV[3] "1" it failed (dead-lettered, or its flow's value could not be carried), "0" not
  returns: {0} wait (nothing starts: a group it belongs to has members running)
           {1, node, value, leaf, call, leaf, call, ...} start node's entry leaves with
              value (msgpack) as their input: each leaf's id and plan record
           {2, now} the flow succeeded, {3, now} it failed (now: 1 by this call, 0
              before)
           {-1} the flow or the leaf is unknown (expired, or never was)
           {-2, status} the flow no longer runs (cancelled)
  uses: lib/bounds.lua lib/flow.lua
  flags: allow-oom
]]
if not (#KEYS == 2 and #ARGV == 3 and int(ARGV[1], 0, MAX_FLOW - 1)
        and (ARGV[3] == '0' or ARGV[3] == '1')) then
  return BOUNDS
end
return flow_walk(K.plan, K.flow, ARGV[1], ARGV[2], ARGV[3] == '1')
