package redislimit

import "github.com/keyrate/keyrate"

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
// = limit and rate = limit per window): see "Algorithms" in the README for where they differ.
// Field l holds the newest instant the key was decided at: every decision
// of the key writes it (a refusal, that field alone), and a server clock
// that steps back is clamped to it, as the in-process bucket decides at
// the newest instant it saw.
//
// Fields are named by T, not by the policy's position, so that a key whose
// policies change (SetTier, tiers) never reads one bucket as another: two
// policies of one T share a bucket (each admission moves it once, as both
// read the same TAT), and a T the key has not been under starts full.
//
// Field g holds the hash's generation, drawn when an admission creates
// it, which receipts name (see refund.go); field r, the key's refund
// ledger: the weight refunds have given back in this generation, which an
// admission's receipt carries (see gcraRefundSource). The ledger never
// wraps: it stops below 2^48, the most a receipt holds, and an admission
// that finds every bucket of its policies full once it has passed 2^47
// draws a new generation (another than the current one) with a ledger of
// 0; with the buckets full, no receipt of the old one held anything.
// Field e, an instant the key is sure to live until (µs). An admission whose new TAT would pass it sets
// the key to expire at the latest TAT and half the longest window more,
// so a busy key pays for PEXPIRE about once per half window; no TAT is
// ever cut short, whatever the policies of other tiers that wrote the key.
const gcraSource = `
local function num(x) return string.format('%.0f', x) end

-- prepare gives each policy its refill interval T and names its field,
-- after g, e, r and l.
local function prepare(tr)
  local T, fields = {}, {'g', 'e', 'r', 'l'}
  for i = 1, tr.P do
    T[i] = math.ceil(tr.windows[i] / tr.limits[i])
    fields[4 + i] = 't' .. num(T[i])
  end
  tr.T, tr.fields = T, fields
  return tr
end

local function load(key, n, tr)
  local cur = redis.pcall('HMGET', key, unpack(tr.fields))
  if cur.err then return nil, cur.err end
  local last, now = tonumber(cur[4]), now0
  if last and now < last then now = last end
  return {key = key, n = n, tr = tr, now = now, room = false, cur = cur, gen = tonumber(cur[1]),
    expires = tonumber(cur[2]) or 0, ledger = tonumber(cur[3]) or 0, last = last, full = false}
end

-- assess finds each bucket's full, the time until it is full again.
local function assess(r)
  local st, tr, n, now = r, r.tr, r.n, r.now
  local full, room = {}, n >= 0 and n <= tr.lmin
  for i = 1, tr.P do
    local f = (tonumber(st.cur[4 + i]) or 0) - now
    if f < 0 then f = 0 end
    full[i] = f
    if f + n * tr.T[i] > tr.limits[i] * tr.T[i] then room = false end
  end
  if n == 0 then room = true end
  st.full, r.room = full, room
end

-- numbers appends each policy's numbers from full; retry is set for a
-- request of weight n that did not fit, when record is not.
local function numbers(r, n, record, gen, rid)
  local st, tr = r, r.tr
  local out = {r.now}
  for i = 1, tr.P do
    local f, t, limit = st.full[i], tr.T[i], tr.limits[i]
    local tokens = math.ceil(f / t)
    local remaining, retry, refill = limit - tokens, 0, 0
    if remaining < 0 then remaining = 0 end
    if not record and n > 0 and n <= limit and f + n * t > limit * t then
      retry = f + n * t - limit * t
    end
    if f > 0 then refill = f - (tokens - 1) * t end
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = remaining, retry, f, refill
  end
  out[2 + 4 * tr.P], out[3 + 4 * tr.P] = gen, rid
  return struct.pack(tr.fmt, unpack(out))
end

local function admit(r)
  local st, tr, n, now = r, r.tr, r.n, r.now
  local set, top = {'l', num(now)}, 0
  if not st.gen then
    st.gen = ` + newGen + `
    set[3], set[4] = 'g', st.gen
  elseif st.ledger >= ` + ledgerRenew + ` then
    local idle = true
    for i = 1, tr.P do
      if st.full[i] > 0 then idle = false end
    end
    if idle then
      st.gen, st.ledger = (st.gen + 1 + (` + newGen + `) % 65535) % 65536, 0
      set[3], set[4], set[5], set[6] = 'g', st.gen, 'r', 0
    end
  end
  for i = 1, tr.P do
    st.full[i] = st.full[i] + n * tr.T[i]
    set[#set + 1] = tr.fields[4 + i]
    set[#set + 1] = num(now + st.full[i])
    if st.full[i] > top then top = st.full[i] end
  end
  local ttl
  if st.expires < now + top then
    ttl = math.ceil((top + tr.wmax / 2) / 1000)
    set[#set + 1] = 'e'
    set[#set + 1] = num(now + ttl * 1000)
  end
  redis.call('HSET', r.key, unpack(set))
  if ttl then redis.call('PEXPIRE', r.key, ttl) end
  return numbers(r, n, true, st.gen, st.ledger)
end

local function describe(r, n)
  if r.gen and (not r.last or r.now > r.last) then redis.pcall('HSET', r.key, 'l', num(r.now)) end
  return numbers(r, n, false, 0, 0)
end
`

var gcraScript = decisionScript(gcraSource)

// ledgerRenew is the ledger past which an admission that finds the
// buckets full starts a new generation (see gcraSource): 2^47, half the
// most a receipt holds, so that a busy key's refunds have 2^47 of weight
// to go before one is refused.
const ledgerRenew = "140737488355328"

// gcraFull returns how long, in microseconds, the bucket of an admitted
// GCRA decision's part p took to be full again: its ResetAfter, which
// says at most the window, where limit refill intervals may pass it (7
// per second: 7 of 142,858µs). It is exact from Remaining and RefillAfter:
// the bucket held limit - Remaining tokens, the newest RefillAfter of a
// whole refill interval T, which is at most the window.
func gcraFull(p keyrate.PolicyDecision) int64 {
	w := p.Window.Microseconds()
	T := (w + int64(p.Limit) - 1) / int64(p.Limit)
	tokens := int64(p.Limit - p.Remaining)
	if tokens <= 0 || p.Remaining < 0 {
		return p.ResetAfter.Microseconds()
	}
	return (tokens-1)*T + p.RefillAfter.Microseconds()
}
