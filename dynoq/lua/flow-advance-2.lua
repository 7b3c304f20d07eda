--[[ flow-advance: calls of one flow ended (dynoq/_core/flows.py): record each one's value,
  or its failure marker when it was dead-lettered, walk its path up (lib/flow.lua) and say
  what starts next. Each end is recorded once, so a call run again (a duplicate delivery,
  a worker killed before its ack) walks the same path with the first run's value, counts
  nothing twice, and is told the same next step, which its push makes once (flow-push).
  A worker sends the ends of a handled batch's calls of one flow in one call.
  KEYS[1] plan  KEYS[2] flow
  ARGV triples, one per call (MAX_BATCH at most): its leaf id, its value or failure
       marker (msgpack), "1" it failed (dead-lettered, or its value could not be carried)
       or "0"
  returns: one reply per call, in order:
           {0} wait (nothing starts: a group it belongs to has members running)
           {1, node, value, leaf, call, leaf, call, ...} start node's entry leaves with
              value (msgpack) as their input: each leaf's id and plan record
           {2, now} the flow succeeded, {3, now} it failed (now: 1 by this call, 0
              before)
           {-1} the flow or the leaf is unknown (expired, or never was)
           {-2, status} the flow no longer runs (cancelled)
  uses: lib/bounds.lua lib/flow.lua
  flags: allow-oom
]]
if not (#KEYS == 2 and fits(#ARGV, 3, 3, MAX_BATCH - 1)) then return BOUNDS end
for i = 1, #ARGV, 3 do
  if not (int(ARGV[i], 0, MAX_FLOW - 1) and (ARGV[i + 2] == '0' or ARGV[i + 2] == '1')) then
    return BOUNDS
  end
end
local fields = {}
for i = 1, #ARGV, 3 do fields[#fields + 1] = 'p:' .. ARGV[i] end
local paths = redis.call('HMGET', K.plan, unpack(fields))
local ctx, out = flow_open(K.plan, K.flow), {}
for i = 1, #ARGV, 3 do
  local n = #out + 1
  out[n] = flow_walk(ctx, ARGV[i], paths[n], ARGV[i + 1], ARGV[i + 2] == '1')
end
flow_close(ctx)
return out
