package redislimit

import "github.com/redis/go-redis/v9"

// gcraSource keeps, per key, a hash: one field per refill interval T (in
// microseconds, window/limit rounded up), tT, holding the policy's
// theoretical arrival time (TAT): the instant, in microseconds on the
// server's clock, at which its bucket is full again. A request of weight n
// fits a policy when the TAT it would leave, max(TAT, now) + n*T, is at
// most limit*T past now; an admission moves every policy's TAT there. With
// full = max(TAT - now, 0), the time until the bucket is full:
//
//	remaining   limit - ceil(full/T), after the decision
//	retryAfter  full + n*T - limit*T, when refused
//	resetAfter  full, after the decision
//	refillAfter the time until the bucket holds one more token
//
// which are the core's keyrate.GCRA numbers, and redis_rate's (with burst
// = limit and rate = limit per window): see the README for where they
// differ. A refusal writes nothing; a server clock that steps back only
// makes every full longer, so it needs no clamp.
//
// Fields are named by T, not by the policy's position, so that a key whose
// policies change (SetTier, tiers) never reads one bucket as another: two
// policies of one T share a bucket (each admission moves it once, as both
// read the same TAT), and a T the key has not been under starts full.
//
// Field g holds the hash's generation, drawn when an admission creates
// it, which receipts name (see refund.go); field r, the key's refund
// ledger: the weight refunds have given back since the hash was created,
// mod 2^48, which an admission's receipt carries (see gcraRefundSource);
// field e, an instant the key is sure to live until (µs). An admission whose new TAT would pass it sets
// the key to expire at the latest TAT and half the longest window more,
// so a busy key pays for PEXPIRE about once per half window; no TAT is
// ever cut short, whatever the policies of other tiers that wrote the key.
const gcraSource = prologue + `
local function num(x) return string.format('%.0f', x) end
local fields, T = {'g', 'e', 'r'}, {}
for i = 1, P do
  T[i] = math.ceil(windows[i] / limits[i])
  fields[3 + i] = 't' .. num(T[i])
end
local cur = redis.call('HMGET', key, unpack(fields))
local gen, expires = tonumber(cur[1]), tonumber(cur[2]) or 0
local full = {}
local allowed = n >= 0 and n <= lmin
for i = 1, P do
  local f = (tonumber(cur[3 + i]) or 0) - now
  if f < 0 then f = 0 end
  full[i] = f
  if f + n * T[i] > limits[i] * T[i] then allowed = false end
end
if n == 0 then allowed = true end
local out = {0, now}
local record = allowed and n > 0
if record then
  local set, top = {}, 0
  if not gen then
    gen = ` + newGen + `
    set[1], set[2] = 'g', gen
  end
  for i = 1, P do
    full[i] = full[i] + n * T[i]
    set[#set + 1] = fields[3 + i]
    set[#set + 1] = num(now + full[i])
    if full[i] > top then top = full[i] end
  end
  local ttl
  if expires < now + top then
    ttl = math.ceil((top + wmax / 2) / 1000)
    set[#set + 1] = 'e'
    set[#set + 1] = num(now + ttl * 1000)
  end
  redis.call('HSET', key, unpack(set))
  if ttl then redis.call('PEXPIRE', key, ttl) end
end
if allowed then out[1] = 1 end
for i = 1, P do
  local f, t, limit = full[i], T[i], limits[i]
  local tokens = math.ceil(f / t)
  local remaining, retry, refill = limit - tokens, 0, 0
  if remaining < 0 then remaining = 0 end
  if not record and n > 0 and n <= limit and f + n * t > limit * t then
    retry = f + n * t - limit * t
  end
  if f > 0 then refill = f - (tokens - 1) * t end
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = f
  out[#out + 1] = refill
end
if record then
  out[#out + 1] = gen
  out[#out + 1] = tonumber(cur[3]) or 0
else
  out[#out + 1] = 0
  out[#out + 1] = 0
end
return out
`

var gcraScript = redis.NewScript(gcraSource)
