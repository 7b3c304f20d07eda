--[[ stream-record: put what a Spark stream's take just popped from one shard into the
  micro-batch it takes (dynoq/_core/streams.py), a copy of each record, so that a replay
  of the batch reads exactly these messages whatever happens to them meanwhile. A message
  already in an open batch of the stream (its visibility ran out while the batch waited,
  and the take popped it again) stays in that batch and is not added: each message is in
  one batch.
  KEYS[1] msgs     hash id -> record (the shard's messages)
  KEYS[2] sopen    hash id -> the open batch of this run of the stream that holds it
  KEYS[3] sbatch   list of the batch's messages on this shard: id, attempts, record, ...
  ARGV[1] batch number (>= 1)   ARGV[2] lifetime of the stream's keys, ms
  ARGV[3..] id, attempts, id, attempts, ... (at most MAX_BATCH messages)
  returns: {recorded, skipped}: skipped were in an open batch already, or gone
  uses: lib/bounds.lua lib/bulk.lua
  flags: allow-oom
]]
local batch, keep = int(ARGV[1], 1, EXACT), int(ARGV[2], 1, MAX_MS)
if not (#KEYS == 3 and batch and keep and #ARGV % 2 == 0 and #ARGV <= 2 + 2 * MAX_BATCH) then
  return BOUNDS
end
local ids, tries = {}, {}
for i = 3, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  tries[#tries + 1] = ARGV[i + 1]
end
if #ids == 0 then return {0, 0} end
local open = bulk_read('HMGET', K.sopen, ids)
local recs = bulk_read('HMGET', K.msgs, ids)
local items, marks, skipped = {}, {}, 0
for k, id in ipairs(ids) do
  if open[k] or not recs[k] then
    skipped = skipped + 1
  else
    items[#items + 1], items[#items + 2], items[#items + 3] = id, tries[k], recs[k]
    marks[#marks + 1], marks[#marks + 2] = id, ARGV[1]
  end
end
if #items > 0 then
  bulk('RPUSH', K.sbatch, items)
  bulk('HSET', K.sopen, marks)
  redis.call('PEXPIRE', K.sbatch, keep)
  redis.call('PEXPIRE', K.sopen, keep)
end
return {#items / 3, skipped}
