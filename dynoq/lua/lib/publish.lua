--[[ lib/publish: a topic's messages into one of its group queues, push-if-absent: a
  publish, and a transaction's commit on a topic.
  uses: lib/push.lua lib/kadd.lua
  publish_into(k, conc, window, now, items, channel, promoting) -> how many were added
    k: the group queue shard's keys by name; conc: a keyed topic's key_concurrency (its
    group queues' kwait, kturn, kstate then stand where the others' delayed, ready,
    unack do), nil on any other; items: from index 1, id, delay ms, priority, body per
    message (on a keyed topic: id, key, body without the key); wakes the group queue's
    waiters on `channel` when they may need the news; promoting: at most how many due
    messages push_into promotes first
]]
local function publish_into(k, conc, window, now, items, channel, promoting)
  if not conc then
    local _, pushed, wake = push_into(k, true, window, now, items, 1, nil, promoting)
    if wake then redis.call('PUBLISH', channel, '1') end
    return pushed
  end
  local pushed, wake = kadd(k, conc, true, window, now, items, 1, {})
  if pushed > 0 then redis.call('HINCRBY', k.counts, 'pushed', pushed) end
  if wake then redis.call('PUBLISH', channel, '1') end
  return pushed
end
