--[[ flow-create: store a new flow's plan and its running state (dynoq.Tasks' chains,
  groups and chords; dynoq/_core/flows.py, lib/flow.lua), in bounded steps: each call
  writes a part of the plan and marks a part of its first calls started (s:<leaf>, the
  caller pushes them); the last one makes it run. Until then the flow is unknown (its
  walk and its handle say so) and its keys live an hour: a creator that died in between
  leaves nothing for long.
  KEYS[1] plan  KEYS[2] flow
  ARGV[1] lifetime ms  ARGV[2] leaves (how many task calls the flow makes)
  ARGV[3] ms its state and result are kept once it ended
  ARGV[4] first calls' leaf ids this part marks ("1,4,7")
  ARGV[5] "1" the last part (the flow runs), "0" more come
  ARGV[6..] pairs: a plan field, its value (p:<leaf> path, l:<leaf> call, e:<node> entries)
  returns: 1 stored, 0 a flow of that id runs or ran (nothing written)
  uses: lib/bounds.lua
  flags: none
]]
local PART_MS = 3600000  -- a part's keys live this long until the last part lands
if not (#KEYS == 2 and fits(#ARGV, 5, 2, 2 * MAX_BATCH) and int(ARGV[1], 1, MAX_MS)
        and int(ARGV[2], 1, MAX_FLOW) and int(ARGV[3], 1, MAX_MS)
        and #ARGV[4] <= 7 * MAX_BATCH and (ARGV[5] == '0' or ARGV[5] == '1')) then
  return BOUNDS
end
if redis.call('HEXISTS', K.flow, 'status') == 1 then return 0 end
for i = 6, #ARGV, 800 do  -- 400 fields a command
  redis.call('HSET', K.plan, unpack(ARGV, i, math.min(i + 799, #ARGV)))
end
local marks, n = {}, 0
for leaf in string.gmatch(ARGV[4], '%d+') do
  n = n + 1
  if n > MAX_BATCH then break end
  marks[#marks + 1] = 's:' .. leaf
  marks[#marks + 1] = 0
end
if #marks > 0 then redis.call('HSET', K.flow, unpack(marks)) end
if ARGV[5] == '0' then
  redis.call('PEXPIRE', K.plan, PART_MS)
  if #marks > 0 then redis.call('PEXPIRE', K.flow, PART_MS) end
  return 1
end
redis.call('HSET', K.flow, 'status', 'running', 'leaves', ARGV[2], 'keep', ARGV[3])
redis.call('PEXPIRE', K.plan, ARGV[1])
redis.call('PEXPIRE', K.flow, ARGV[1])
return 1
