--[[ flow-members: each call of a flow, as its handle lists them: its leaf id, its plan
  record, and what became of it; with the input of each call started and not ended (for
  a reconcile's push of a call never pushed: dynoq/_core/flows.py).
  KEYS[1] plan  KEYS[2] flow
  ARGV[1] the first leaf id to look at  ARGV[2] how many ids to look at (MAX_BATCH at
  most: a handle reads a flow in pages)
  returns: {status, failure, leaf, call, state, input, size, path, leaf, ...}: state "p"
           pending (not started), "s" started, "d" ended, "x" failed; input (msgpack, or
           false: none) of a started call; size: bytes of an ended call's value (msgpack)
           or 0; path: its p:<leaf> (lib/flow.lua); {false, false} for a flow unknown
  uses: lib/bounds.lua
  flags: no-writes
]]
local first, count = int(ARGV[1], 0, MAX_FLOW), int(ARGV[2], 1, MAX_BATCH)
if not (#KEYS == 2 and #ARGV == 2 and first and count) then return BOUNDS end
local status, failure = unpack(redis.call('HMGET', K.flow, 'status', 'failure'))
local out = {status, failure}
if not status then return out end
for leaf = first, math.min(first + count, MAX_FLOW) - 1 do
  local call = redis.call('HGET', K.plan, 'l:' .. leaf)
  if call then
    local ended, node = unpack(redis.call('HMGET', K.flow, 'd:' .. leaf, 's:' .. leaf))
    local state, input, size = 'p', false, 0
    if ended then
      state = redis.call('HEXISTS', K.flow, 'x:' .. leaf) == 1 and 'x' or 'd'
      size = #ended
    elseif node then
      state, input = 's', redis.call('HGET', K.flow, 'i:' .. node) or false
    end
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = leaf, call, state, input, size
    out[n + 6] = redis.call('HGET', K.plan, 'p:' .. leaf) or ''
  end
end
return out
