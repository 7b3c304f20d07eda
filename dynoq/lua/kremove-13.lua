--[[ kremove: delete one message of a keyed shard from every state; its key moves on.
  KEYS[1] msgs  KEYS[2] kwait  KEYS[3] kturn  KEYS[4] kstate  KEYS[5] seq
  KEYS[6] unack KEYS[7] delayed  KEYS[8] dead  KEYS[9] dlv  KEYS[10] why
  KEYS[11] counts  KEYS[12] epoch  KEYS[13] control
  ARGV[1] the caller's epoch of the queue ("" = not checked)
  ARGV[2] id  ARGV[3] wake channel  ARGV[4] key_concurrency
  returns: 1 removed (a debounced copy held for it too: lib/debounce.lua), 0 unknown id,
  or GONE
  uses: lib/bounds.lua lib/refusal.lua lib/kdrop.lua lib/bulk.lua lib/control.lua
        lib/debounce.lua
  flags: allow-oom
]]
local conc = int(ARGV[4], 1, MAX_KEY_CONCURRENCY)
if not (#KEYS == 13 and #ARGV == 4 and conc) then return BOUNDS end
local refused = gone(K.epoch, ARGV[1])
if refused then return refused end
local held = ddrop(K, ARGV[2])
local rec = redis.call('HGET', K.msgs, ARGV[2])
if not rec then return held end
kdrop(K, ARGV[2], rec, conc)
forget(K.control, {ARGV[2]})  -- a cancel asked of it, its progress
redis.call('PUBLISH', ARGV[3], '1')
return 1
