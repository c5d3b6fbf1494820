package redislimit

// Earlier releases kept a key's sliding log as a sorted set at
// <prefix>{<tag>}<id>:sl (two entries per event: one scored by its instant
// with its start on a running total as member, one scored by minus its end
// whose member, for the newest event, carries "start:instant:smin:age:ttl"
// in hex). The string log lives at ...:log, in the same hash tag and so the
// same Cluster slot, and the script is given both names.
//
// mergeLegacySource, run by the sliding log script after it has read its
// own header, when the sorted set exists, folds it into the string log and
// deletes it: the events of both, oldest first, each at its instant
// rounded up to the tick and with its weight, and the later of their
// newest instants and expiries. So a key written by an earlier release is
// decided with every event it admitted from its first decision after the
// upgrade, and a rolling deploy loses nothing: a replica still on an
// earlier release reads and writes the sorted set alone, and the next
// decision of an upgraded one merges what it wrote. Until the rollout
// ends, the earlier release's replicas see only the events written to the
// sorted set since the last merge, so they may admit more than the limit;
// the upgraded ones never do. Rolling back has no merge: an earlier release
// does not read the string log, so it starts every key afresh, once.
//
// Events that have left the longest window of the policies deciding now
// are dropped, as an admission would drop them. The running totals start
// again from 0; a merged log that would hold 2^32 or more (only replicas
// of both releases admitting past limits near 2^31 could make one) keeps
// the first 2^32-1, which refuses every request until they leave.
const mergeLegacySource = `
local top = redis.call('ZRANGE', old, 0, 0, 'WITHSCORES')
local lt, lttl = string.match(top[1] or '', '^%x+:(%x+):%x+:%x+:(%x+)$')
if not lt then return redis.error_reply('not a keyrate sorted-set log') end
local ts = redis.call('ZRANGEBYSCORE', old, '(0', '+inf', 'WITHSCORES')
local ltotal, llast = -tonumber(top[2]), tonumber(lt, 16)
local px = redis.call('PTTL', old)
if cnt > 0 then
  local p = redis.call('PTTL', key)
  if p < 0 or px < 0 then px = -1 elseif p > px then px = p end
end
redis.call('DEL', old)
local ai, ac = ring(hdr:sub(H + 1, H + 8 * (cnt - rc)))
if llast > last then last = llast end
if llast + tonumber(lttl, 16) > expires then expires = llast + tonumber(lttl, 16) end
if now < last then now = last end
local h = now - wmax
local ins, cs, run, prev = {}, {}, 0, base
local function add(t, w)
  w = math.min(w, M - 1 - run)
  if t <= h or w <= 0 then return end
  t = math.ceil(t / tick) * tick
  run = run + w
  if ins[#ins] and t <= ins[#ins] then cs[#cs] = run else ins[#ins + 1], cs[#cs + 1] = t, run end
end
local a, b = 1, 1
while a <= #ai or b < #ts do
  if b > #ts or (a <= #ai and ai[a] <= tonumber(ts[b + 1])) then
    add(ai[a], (ac[a] - prev) % M)
    prev = ac[a]
    a = a + 1
  else
    local e = ltotal
    if ts[b + 2] then e = tonumber(ts[b + 2], 16) end
    add(tonumber(ts[b + 1]), e - tonumber(ts[b], 16))
    b = b + 2
  end
end
if #ins == 0 then
  redis.call('DEL', key)
  cnt, rc = 0, 0
else
  if px < 0 then px = nil end
  for i = 1, #ins do ins[i] = struct.pack(ENT, (ins[i] / tick) % M, cs[i]) end
  write(table.concat(ins), #ins, 0, #ins, px)
end
`
