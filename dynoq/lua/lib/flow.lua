--[[ lib/flow: a flow's walk (dynoq/_core/flows.py): what one of its calls ending means.
  A flow's plan hash holds, per leaf (a task call), p:<leaf> its path: one level per
  ancestor, innermost first, ';' between, each "node,kind,index,size,next": kind "c" a
  chain (next: the step after this one, -1 for none), "g" a group that fails when a
  member fails, "h" a group whose failed members become failure markers (a chord's
  on_failure="continue"), "l" and "m" the same two of a group whose members are all
  task calls (its members' values are their d:<leaf>, the leaves numbered after it:
  each is stored once); l:<leaf> its call (msgpack); e:<node> a chain's or group's entry
  leaves ("1,4,7"). Its state hash holds status (running, succeeded, failed,
  cancelled), keep (ms to keep it once ended), d:<leaf> an ended call's value (or its
  failure marker), ended (how many), g:<group>:<i> a "g" or "h" group member's value,
  c:<group> how many ended, f:<node> a chain or group that failed, s:<leaf> the node whose start
  pushed the leaf (a pushed call), i:<node> the input that node started with, result,
  failure (the first failure's marker), v:<group> a complete group's value.
  flow_open(plan, flow) -> a walk's context: one call's ends share its reads of the
    status, each group's count and each node's failure (a call is atomic: what it read
    stays true but for its own writes, which update the context); flow_close(ctx)
    writes what the walks counted (ended, each group's count)
  flow_walk(ctx, leaf, path, value, failed) (path: the plan's p:<leaf>)
    -> {0} wait, {1, node, value, leaf, call, ...} start node's entry leaves with value,
       {2, now} succeeded (or {3, now} failed; now: 1 by this walk, 0 before), {-1}
       unknown, {-2, status} not running
    Records the leaf's value once (HSETNX: a call told again walks with its first
    value; a call that ends after its flow ended is recorded too), then walks: a chain with a next step starts it; a group counts the member
    once and, complete, goes on with its members' values (a msgpack array); a failure
    goes up until a group "h" or "m" takes its marker as the member's value, or it reaches the
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
  local head
  if n < 16 then
    head = string.char(0x90 + n)
  elseif n < 65536 then
    head = string.char(0xdc, math.floor(n / 256), n % 256)
  else
    head = string.char(0xdd, 0, math.floor(n / 65536), math.floor(n / 256) % 256, n % 256)
  end
  return head .. table.concat(values)
end

-- the values of these fields, read 1,000 a command; nil if one is missing
local function flow_gather(flow, fields)
  local values = {}
  for i = 1, #fields, 1000 do
    local got = redis.call('HMGET', flow, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #got do
      if not got[j] then return nil end
      values[#values + 1] = got[j]
    end
  end
  return values
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

local function flow_open(plan, flow)
  return {plan = plan, flow = flow, status = redis.call('HGET', flow, 'status'), ended = 0,
          counts = {}, failed = {}}
end

local function flow_close(ctx)
  if ctx.ended > 0 then redis.call('HINCRBY', ctx.flow, 'ended', ctx.ended) end
  for node, count in pairs(ctx.counts) do
    if count.new then redis.call('HSET', ctx.flow, 'c:' .. node, count.n) end
  end
end

-- a group's count as this call sees it (read once, counted here, written by flow_close)
local function flow_count(ctx, node)
  local count = ctx.counts[node]
  if not count then
    count = {n = tonumber(redis.call('HGET', ctx.flow, 'c:' .. node) or 0), new = false}
    ctx.counts[node] = count
  end
  return count
end

-- whether a chain or group failed (read once; this call's failures set it)
local function flow_failed(ctx, node)
  local failed = ctx.failed[node]
  if failed == nil then
    failed = redis.call('HEXISTS', ctx.flow, 'f:' .. node) == 1
    ctx.failed[node] = failed
  end
  return failed
end

local function flow_walk(ctx, leaf, path, value, failed)
  local plan, flow, status = ctx.plan, ctx.flow, ctx.status
  if not status then return {-1} end
  if not path or #path > FLOW_PATH then return {-1} end
  -- the call's end is recorded even in a flow that ended (its members list says so)
  local fresh = redis.call('HSETNX', flow, 'd:' .. leaf, value) == 1
  if fresh then
    ctx.ended = ctx.ended + 1
    if failed then redis.call('HSET', flow, 'x:' .. leaf, '1') end
  else
    value = redis.call('HGET', flow, 'd:' .. leaf)  -- told again: the first end counts
    failed = redis.call('HEXISTS', flow, 'x:' .. leaf) == 1
  end
  if status == 'failed' then return {3} end
  if status ~= 'running' and status ~= 'succeeded' then return {-2, status} end
  local first = string.match(path, '^[^;]*')
  for level in string.gmatch(path, '[^;]+') do
    local node, kind, index, size, nxt = string.match(level, '^(%d+),([cghlm]),(%d+),(%d+),(-?%d+)$')
    if not node then return {-1} end
    -- a member of a group of calls is the leaf itself: its place in it, the first level
    local calls = kind == 'l' or kind == 'm'
    if calls and level ~= first then return {-1} end
    if failed and kind ~= 'h' and kind ~= 'm' then
      redis.call('HSETNX', flow, 'f:' .. node, value)  -- the chain or group failed
      ctx.failed[node] = true
    elseif kind == 'c' then
      -- (a chain fails only by its step that runs: none after it ever started)
      if nxt ~= '-1' then return flow_start(plan, flow, nxt, value) end
    elseif flow_failed(ctx, node) then
      return {0}  -- a member of a group that failed before: nothing more to do
    else
      failed = false  -- an "h" or "m" group takes a failure marker as its member's value
      local slot = 'g:' .. node .. ':'
      local count = flow_count(ctx, node)
      -- counted once: its value recorded now (d:<leaf> of a group of calls), or not
      if (calls and fresh) or (not calls and redis.call('HSETNX', flow, slot .. index, value) == 1) then
        count.n, count.new = count.n + 1, true
      end
      size = tonumber(size)
      if size > MAX_GROUP then return {-1} end
      if count.n < size then return {0} end
      -- complete: its value is built once (a member told again reads it back)
      value = redis.call('HGET', flow, 'v:' .. node)
      if not value then
        -- a group of calls' members are the leaves after it (canvas.plan numbers them)
        local fields, prefix, base = {}, slot, 0
        if calls then prefix, base = 'd:', tonumber(node) + 1 end
        for i = 0, size - 1 do fields[i + 1] = prefix .. (base + i) end
        local values = flow_gather(flow, fields)
        if not values then return {-1} end
        value = flow_array(values)
        redis.call('HSET', flow, 'v:' .. node, value)
      end
    end
  end
  local outcome, field, code = 'succeeded', 'result', 2
  if failed then outcome, field, code = 'failed', 'failure', 3 end
  local ended = flow_end(plan, flow, outcome, field, value)
  if ended == 1 then ctx.status = outcome end
  return {code, ended}
end
