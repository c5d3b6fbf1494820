package redislimit

import "github.com/redis/go-redis/v9"

// fixedWindowSource keeps, per key, a hash with two fields per window
// length L (in microseconds): wL, the number of its current window, and nL,
// the count in it. Windows are aligned to multiples of their length since
// the Unix epoch. A count starts over when its window number changes; a
// clock that steps back stays in the newest window seen. The key expires
// when the last of its current windows ends (set when one of them starts).
// All of a window's events leave together when it ends, so refillAfter
// equals resetAfter. A field g holds the hash's generation, drawn when an
// admission creates it, which receipts name (see refund.go).
//
// Fields are named by window length, not by the policy's position, so that
// a key whose policies change (SetTier, tiers) never reads one window's
// number as another's: two policies of one length count the same events,
// and a length the key has not been under starts from 0.
const fixedWindowSource = prologue + `
local function num(x) return string.format('%.0f', x) end
local fields = {}
for i = 1, P do
  fields[2 * i - 1] = 'w' .. num(windows[i])
  fields[2 * i] = 'n' .. num(windows[i])
end
fields[2 * P + 1] = 'g'
local cur = redis.call('HMGET', key, unpack(fields))
local gen = tonumber(cur[2 * P + 1])
local idx, count, left = {}, {}, {}
local fresh, ttl = false, 0
for i = 1, P do
  local w = windows[i]
  local x = math.floor(now / w)
  local c = 0
  local stored = tonumber(cur[2 * i - 1])
  if stored then
    if stored > x then x = stored end
    if stored == x then c = tonumber(cur[2 * i]) or 0 end
  end
  idx[i], count[i], left[i] = x, c, (x + 1) * w - now
  if c == 0 then fresh = true end
  if left[i] > ttl then ttl = left[i] end
end
local fits = n >= 0 and n <= lmin
local allowed = fits
for i = 1, P do
  if count[i] + n > limits[i] then allowed = false end
end
if n == 0 then allowed = true end
local out = {0, now}
if allowed and n > 0 then
  local set = {}
  if not gen then
    gen = ` + newGen + `
    set[1], set[2] = 'g', gen
  end
  for i = 1, P do
    set[#set + 1] = fields[2 * i - 1]
    set[#set + 1] = num(idx[i])
    set[#set + 1] = fields[2 * i]
    set[#set + 1] = count[i] + n
  end
  redis.call('HSET', key, unpack(set))
  if fresh then redis.call('PEXPIRE', key, math.ceil(ttl / 1000)) end
  out[1] = 1
  for i = 1, P do
    out[#out + 1] = limits[i] - count[i] - n
    out[#out + 1] = 0
    out[#out + 1] = left[i]
    out[#out + 1] = left[i]
  end
  out[#out + 1] = gen
  out[#out + 1] = 0
  return out
end
if allowed then out[1] = 1 end
for i = 1, P do
  local remaining, retry, reset = limits[i] - count[i], 0, 0
  if remaining < 0 then remaining = 0 end
  if count[i] > 0 then reset = left[i] end
  if n > 0 and n <= limits[i] and count[i] + n > limits[i] then retry = left[i] end
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  out[#out + 1] = reset
end
out[#out + 1] = 0
out[#out + 1] = 0
return out
`

var fixedWindowScript = redis.NewScript(fixedWindowSource)
