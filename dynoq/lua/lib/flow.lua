--[[ lib/flow: a flow's walk (dynoq/_core/flows.py): what one of its calls ending means.
  A flow's plan hash holds, per leaf (a task call), p:<leaf> its path: one level per
  ancestor, innermost first, ';' between, each "node,kind,index,size,next": kind "c" a
  chain (next: the step after this one, -1 for none), "g" a group that fails when a
  member fails, "h" a group whose failed members become failure markers (a chord's
  on_failure="continue"); l:<leaf> its call (msgpack); e:<node> a chain's or group's
  entry leaves ("1,4,7"). Its state hash holds status (running, succeeded, failed,
  cancelled), keep (ms to keep it once ended), d:<leaf> an ended call's value (or its
  failure marker), ended (how many), g:<group>:<i> a group member's value, c:<group>
  how many ended, f:<node> a chain or group that failed, s:<leaf> the node whose start
  pushed the leaf (a pushed call), i:<node> the input that node started with, result,
  failure (the first failure's marker), v:<group> a complete group's value.
  flow_walk(plan, flow, leaf, value, failed)
    -> {0} wait, {1, node, value, leaf, call, ...} start node's entry leaves with value,
       {2, now} succeeded (or {3, now} failed; now: 1 by this walk, 0 before), {-1}
       unknown, {-2, status} not running
    Records the leaf's value once (HSETNX: a call told again walks with its first
    value; a call that ends after its flow ended is recorded too), then walks: a chain with a next step starts it; a group counts the member
    once and, complete, goes on with its members' values (a msgpack array); a failure
    goes up until a group "h" takes its marker as the member's value, or it reaches the
    root: the flow failed. A path longer than FLOW_PATH bytes or a group of more than
    MAX_GROUP members is refused as unknown: dynoq writes none (canvas.py MAX_DEPTH,
    MAX_MEMBERS), and so every call's work is bounded.
  flow_end(plan, flow, status, field, value) -> 1 when it ended the flow now (0: before):
    its status, its result or failure (once), and its keys kept for `keep` ms from now
  uses: lib/bounds.lua
]]
local FLOW_PATH = 1024

local function flow_end(plan, flow, status, field, value)
  if redis.call('HSETNX', flow, field, value) == 0 then return 0 end
  local keep = redis.call('HGET', flow, 'keep')
  redis.call('HSET', flow, 'status', status)
  redis.call('PEXPIRE', flow, keep)
  redis.call('PEXPIRE', plan, keep)
  return 1
end

-- a msgpack array of values already msgpack: its header, then the values as they are
local function flow_array(values)
  local n = #values
  if n < 16 then return string.char(0x90 + n) .. table.concat(values) end
  return string.char(0xdc, math.floor(n / 256), n % 256) .. table.concat(values)
end

local function flow_start(plan, flow, node, value)
  redis.call('HSETNX', flow, 'i:' .. node, value)
  local out = {1, node, value}
  -- a chain or group starts its entry leaves (e:<node>); a leaf has none: itself
  for leaf in string.gmatch(redis.call('HGET', plan, 'e:' .. node) or node, '%d+') do
    redis.call('HSETNX', flow, 's:' .. leaf, node)
    out[#out + 1] = leaf
    out[#out + 1] = redis.call('HGET', plan, 'l:' .. leaf)
  end
  return out
end

local function flow_walk(plan, flow, leaf, value, failed)
  local status = redis.call('HGET', flow, 'status')
  if not status then return {-1} end
  local path = redis.call('HGET', plan, 'p:' .. leaf)
  if not path or #path > FLOW_PATH then return {-1} end
  -- the call's end is recorded even in a flow that ended (its members list says so)
  if redis.call('HSETNX', flow, 'd:' .. leaf, value) == 1 then
    redis.call('HINCRBY', flow, 'ended', 1)
    if failed then redis.call('HSET', flow, 'x:' .. leaf, '1') end
  else
    value = redis.call('HGET', flow, 'd:' .. leaf)  -- told again: the first end counts
    failed = redis.call('HEXISTS', flow, 'x:' .. leaf) == 1
  end
  if status == 'failed' then return {3} end
  if status ~= 'running' and status ~= 'succeeded' then return {-2, status} end
  for level in string.gmatch(path, '[^;]+') do
    local node, kind, index, size, nxt = string.match(level, '^(%d+),([cgh]),(%d+),(%d+),(-?%d+)$')
    if not node then return {-1} end
    if failed and kind ~= 'h' then
      redis.call('HSETNX', flow, 'f:' .. node, value)  -- the chain or group failed
    elseif kind == 'c' then
      -- (a chain fails only by its step that runs: none after it ever started)
      if nxt ~= '-1' then return flow_start(plan, flow, nxt, value) end
    elseif redis.call('HEXISTS', flow, 'f:' .. node) == 1 then
      return {0}  -- a member of a group that failed before: nothing more to do
    else
      failed = false  -- an "h" group takes a failure marker as its member's value
      local slot = 'g:' .. node .. ':'
      local count
      if redis.call('HSETNX', flow, slot .. index, value) == 1 then
        count = redis.call('HINCRBY', flow, 'c:' .. node, 1)
      else
        count = tonumber(redis.call('HGET', flow, 'c:' .. node))
      end
      size = tonumber(size)
      if size > MAX_GROUP then return {-1} end
      if count < size then return {0} end
      -- complete: its value is built once (a member told again reads it back)
      value = redis.call('HGET', flow, 'v:' .. node)
      if not value then
        local values = {}
        for i = 0, size - 1 do values[i + 1] = redis.call('HGET', flow, slot .. i) end
        value = flow_array(values)
        redis.call('HSET', flow, 'v:' .. node, value)
      end
    end
  end
  if failed then return {3, flow_end(plan, flow, 'failed', 'failure', value)} end
  return {2, flow_end(plan, flow, 'succeeded', 'result', value)}
end
