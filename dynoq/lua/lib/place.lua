--[[ lib/place: where a new message goes in its shard. Push, publish and a transaction's
  commit all place messages through here, so one piece of code decides it.
  uses: lib/bulk.lua lib/record.lua lib/pin.lua
  placing(delayed, ready, now) -> a plan for messages placed at `now`
  place(p, id, delay, prio, seqno): delay > 0: `delayed` at now + delay; else `ready`
    at prio * PRIO + seqno (seqno: the shard's ready sequence, from its `seq` key)
  placed(p) -> wake: writes the plan; true when a waiter may need the news (the shard's
    ready set was empty and now is not, or a delayed message is due before every one
    already delayed; see lib/push.lua)
]]
local function placing(delayed, ready, now)
  return {delayed = delayed, ready = ready, now = now, zready = {}, zdelayed = {},
          wake = false, first_due = nil}
end

local function place(p, id, delay, prio, seqno)
  if delay > 0 then
    if not p.wake then
      if not p.first_due then
        p.first_due = tonumber(head(p.delayed)[2]) or math.huge
      end
      p.wake = p.now + delay < p.first_due
    end
    local z = p.zdelayed
    z[#z + 1] = p.now + delay
    z[#z + 1] = id
  else
    local z = p.zready
    if not p.wake and #z == 0 then p.wake = redis.call('EXISTS', p.ready) == 0 end
    z[#z + 1] = prio * PRIO + seqno
    z[#z + 1] = id
  end
end

local function placed(p)
  bulk('ZADD', p.ready, p.zready)
  bulk('ZADD', p.delayed, p.zdelayed)
  return p.wake
end
