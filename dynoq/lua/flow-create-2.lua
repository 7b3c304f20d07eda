--[[ flow-create: store a new flow's plan and its running state (dynoq.Tasks' chains,
  groups and chords; dynoq/_core/flows.py, lib/flow.lua), both kept for the flow's
  lifetime; its first calls are marked started (s:<leaf>), the caller pushes them.
  KEYS[1] plan  KEYS[2] flow
  ARGV[1] lifetime ms  ARGV[2] leaves (how many task calls the flow makes)
  ARGV[3] ms its state and result are kept once it ended
  ARGV[4] its first calls' leaf ids ("1,4,7")
  ARGV[5..] pairs: a plan field, its value (p:<leaf> path, l:<leaf> call, e:<node> entries)
  returns: 1 stored, 0 a flow of that id exists (nothing written)
  uses: lib/bounds.lua
  flags: none
]]
if not (#KEYS == 2 and fits(#ARGV, 4, 2, 3 * MAX_FLOW) and int(ARGV[1], 1, MAX_MS)
        and int(ARGV[2], 1, MAX_FLOW) and int(ARGV[3], 1, MAX_MS)
        and #ARGV[4] <= 6 * MAX_FLOW) then
  return BOUNDS
end
if redis.call('EXISTS', K.flow) == 1 or redis.call('EXISTS', K.plan) == 1 then return 0 end
local chunk = {}
for i = 5, #ARGV do
  chunk[#chunk + 1] = ARGV[i]
  if #chunk == 400 or i == #ARGV then
    redis.call('HSET', K.plan, unpack(chunk))
    chunk = {}
  end
end
redis.call('HSET', K.flow, 'status', 'running', 'leaves', ARGV[2], 'keep', ARGV[3])
for leaf in string.gmatch(ARGV[4], '%d+') do redis.call('HSET', K.flow, 's:' .. leaf, 0) end
redis.call('PEXPIRE', K.plan, ARGV[1])
redis.call('PEXPIRE', K.flow, ARGV[1])
return 1
