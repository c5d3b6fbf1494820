package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// Refund gives back all that the admitted decision *d recorded for key
// and has not given back yet, as if its request had never been made, from
// any replica: RefundN of d.Receipt.N(), with its guarantees, errors and
// cost. Taking first and refunding what should not count (a successful
// login, a response under 400) makes "count only the failures" exact
// across replicas.
func (l *Limiter) Refund(ctx context.Context, key string, d *keyrate.Decision) error {
	n := 0
	if d != nil {
		n = d.Receipt.N()
	}
	return l.RefundN(ctx, key, d, n)
}

// RefundN gives back n of the weight the admitted decision *d recorded for
// key, as keyrate.Limiter.RefundN does, from the decision's own entry and
// from every policy, in one script run from any Limiter with the same
// prefix, algorithm and hash tag secret (a fallback decision, in its
// fallback), and lowers d.Receipt.N by n. It returns an error wrapping
// keyrate.ErrNothingToRefund when the key holds nothing of d,
// keyrate.ErrExceedsLimit for n outside 1 to d.Receipt.N(), or
// keyrate.ErrInvalidKey for "". When Redis does not answer it returns that
// error and consumes the Receipt: never applied twice ("Refunds", README).
func (l *Limiter) RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error {
	if d == nil || d.Receipt.N() <= 0 {
		return fmt.Errorf("redislimit: refund: %w: the decision has nothing left to give back (it recorded nothing, or was refunded already)", keyrate.ErrNothingToRefund)
	}
	if left := d.Receipt.N(); n < 1 || n > left {
		return fmt.Errorf("redislimit: refund: %w: n is %d, the decision has %d left to give back", keyrate.ErrExceedsLimit, n, left)
	}
	if key == "" {
		return fmt.Errorf("redislimit: refund: %w: empty key", keyrate.ErrInvalidKey)
	}
	id := clientkey.Bound(key)
	if d.Fallback {
		return l.fallbackRefund(ctx, key, id, d, n)
	}
	if l.closed.Load() {
		return errClosed("refund")
	}
	if l.leases != nil && l.leases.refundLeased(id, d, n, l.leaseNow()) {
		return nil // into the live lease the decision was spent from
	}
	tr := l.tierFor(ctx, key)
	if err := ctx.Err(); err != nil {
		return err
	}
	t := l.tagOf(key, id)
	r := d.Receipt
	skey, args := l.refundArgs(id, t, tr, d, n)
	v, err := l.runBudgeted(ctx, l.refundScript(), []string{skey}, args)
	if err != nil {
		// The script may have run: never let the receipt give back twice.
		d.Receipt = keyrate.Receipt{}
		if l.deny != nil {
			l.deny.forget(id)
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("redislimit: refund %s: %w", keyRef(t), ctx.Err())
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("redislimit: refund %s: no answer from redis within the %v budget: %w", keyRef(t), l.timeout, err)
		}
		return fmt.Errorf("redislimit: refund %s: %w", keyRef(t), err)
	}
	switch v {
	case 1:
	case 0:
		return fmt.Errorf("redislimit: refund %s: %w: the decision is another key's, or Redis lost the key since", keyRef(t), keyrate.ErrNothingToRefund)
	default:
		return fmt.Errorf("redislimit: refund %s: %w: the key no longer holds the decision's weight", keyRef(t), keyrate.ErrNothingToRefund)
	}
	d.Receipt = backend.NewReceipt(backend.ReceiptAt(r), r.N()-n, backend.ReceiptID(r))
	if d.Receipt.N() == 0 {
		d.Receipt = keyrate.Receipt{}
	}
	if l.deny != nil {
		l.deny.forget(id)
	}
	return nil
}

// refundArgs returns the Redis key and the refund script's ARGV that give
// back n of the decision *d for the key id, of hash tag t, under tier tr.
func (l *Limiter) refundArgs(id, t string, tr *tier, d *keyrate.Decision, n int) (string, []any) {
	r := d.Receipt
	args := make([]any, 5, 5+3*backend.MaxPolicies)
	args[0], args[1], args[2], args[3], args[4] = n, "", backend.ReceiptAt(r).UnixMicro(), int64(backend.ReceiptID(r)&maxOffset), backend.ReceiptID(r)>>48
	if l.clock != nil {
		args[1] = l.localNow() / 1000
	}
	if ps := d.Policies(); l.script != slidingLogScript && len(ps) > 0 {
		// The counts and buckets the decision itself went to.
		for _, p := range ps {
			reset := p.ResetAfter.Microseconds()
			if l.script == gcraScript {
				reset = gcraFull(p) // ResetAfter stops at the window
			}
			args = append(args, p.Limit, p.Window.Microseconds(), reset)
		}
	} else {
		// The sliding windows of the tier now, unless the decision
		// recorded no entry (its policies were calendars alone).
		cals := d.Policies()
		entry := len(cals) == 0
		for _, p := range cals {
			entry = entry || p.Calendar == (keyrate.Calendar{})
		}
		for i := 0; entry && i < len(tr.args); i += 2 {
			if tr.ids[i/2] == 0 {
				args = append(args, tr.args[i], tr.args[i+1], 0)
			}
		}
		// The calendars the decision counted against, each with the end
		// of the period it was made in: a period that turned since
		// gives nothing back.
		if len(cals) == 0 {
			cals = make([]keyrate.PolicyDecision, len(tr.policies))
			for i, p := range tr.policies {
				cals[i].Policy = p
			}
		}
		for _, p := range cals {
			if p.Calendar != (keyrate.Calendar{}) {
				_, end := backend.Period(p.Calendar, backend.ReceiptAt(r))
				args = append(args, int64(calendarID(p.Calendar)), -1, end.UnixMicro())
			}
		}
	}
	return l.storeKey(id, t), args
}

// A Receipt of this package holds, besides the weight, the instant the
// decision was made at on the server's clock (At, in microseconds) and an
// ID of the key's generation (its top 16 bits) and the script's rid (the
// low 48 bits, see scripts.go): under the sliding log, how much later than
// At it recorded the events (in microseconds: it rounds instants up to its
// tick and resolution, and never records one before the newest entry),
// from which the refund finds the events' entry alone, so a decision's
// receipt stays good whichever entries were added, pruned or refunded
// since; under GCRA, the key's refund ledger at the decision.

// maxOffset is the largest rid a Receipt holds.
const maxOffset = 1<<48 - 1

// maxLedger is maxOffset in Lua: the most GCRA's refund ledger holds.
const maxLedger = "281474976710655"

// newReceipt returns the Receipt of n events decided at the server's
// instant now (µs), in the key state of generation gen, with the script's
// rid.
func newReceipt(n int, now, rid, gen int64) keyrate.Receipt {
	// Only a resolution of some nine years could push the recorded
	// instant that far; the refund then finds no entry, and says so.
	// GCRA's ledger stops below 2^48 already.
	off := min(max(rid, 0), maxOffset)
	return backend.NewReceipt(time.UnixMicro(now), n, uint64(gen&0xffff)<<48|uint64(off))
}

// newGen is the Lua expression of a new generation for a key's state:
// random on servers that do not seed math.random alike for every script
// run (Redis 7 and later), and on earlier ones the microsecond the state
// was created at, mod 2^16, so that a state made again after a loss still
// differs from the lost one but by chance.
const newGen = `(math.random(0, 65535) + now) % 65536`

// refundScript returns the refund script of the Limiter's algorithm.
func (l *Limiter) refundScript() *redis.Script {
	switch l.script {
	case fixedWindowScript:
		return fixedWindowRefundScript
	case gcraScript:
		return gcraRefundScript
	}
	return slidingLogRefundScript
}

// The refund scripts speak one protocol:
//
//	KEYS[1]  the key's state
//	ARGV[1]  n, the weight to give back
//	ARGV[2]  the instant to refund at, in microseconds, or "" to read the
//	         server's TIME (as in scripts.go)
//	ARGV[3]  the instant the decision was made at (µs)
//	ARGV[4]  the receipt's rid (see scripts.go): how much later than that
//	         the sliding log recorded the events, or GCRA's refund ledger
//	ARGV[5]  the generation of the key's state the receipt names
//	ARGV[6:] limit, window, resetAfter triples, windows and resetAfter in
//	         microseconds: for the sliding log, the sliding policies of the
//	         key's tier now (resetAfter 0), then for each calendar policy
//	         of the decision its calendar's id, -1 and the end of the
//	         period holding the decision's instant; for the fixed window and GCRA, the
//	         decision's own policies and each one's ResetAfter (GCRA:
//	         the time its bucket took to be full again, past the window
//	         where it is, see gcraFull), which name the counts and
//	         buckets the decision went to
//
// Each returns 1 when it gave the weight back, 0 when the key's state is
// not the receipt's generation (or there is none), and -1 when it is but
// no longer holds the weight; only 1 writes.
const refundPrologue = readNow + `
local decided, rid, gen = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local P = (#ARGV - 5) / 3
local limits, windows, resets, wmax = {}, {}, {}, 0
local cals = {}
for i = 1, P do
  limits[i] = tonumber(ARGV[3 + 3 * i])
  windows[i] = tonumber(ARGV[4 + 3 * i])
  resets[i] = tonumber(ARGV[5 + 3 * i])
  if windows[i] > wmax then wmax = windows[i] end
  if windows[i] < 0 then cals[#cals + 1] = {limits[i], resets[i]} end
end
`

// slidingLogRefundSource finds the entry the receipt's events went to (the
// log's layout is in slidinglog.go) and takes n from its weight: it
// lowers the running totals of that entry and of every later one by n,
// and removes the entry when nothing is left in it. The entry is the one
// at the instant recorded, in the log's tick: an admission's entry is the
// first at or after it (entries before it are earlier, or it merged into
// the newest), and a rewrite of the log in a coarser tick rounds every
// entry up alike, so the entries that meet merge with it; one rewritten
// in a finer tick after a coarser one keeps its coarser instant, and the
// refund finds nothing. An entry that has left the longest window of the
// key's policies, or was pruned, counts as gone. The cost is O(log N) to
// find the entry, then O(entries after it): a refund soon after its
// decision rewrites the newest few entries and the header.
//
// Taking the newest entry away leaves the newest admission's instant,
// last, after every entry: slidinglog.go recovers instants from it
// either way. last itself stays, so decisions still never go before it:
// taking away the only entry leaves a log of no entries, with its last
// and its expiry, rather than no key. Without last, a server clock that
// stepped back (a failover, a correction) would decide before the
// instant an admission pruned at, and count again without the events it
// pruned, which are back in the window at that earlier instant.
const slidingLogRefundSource = refundPrologue + `
local B, H, M, CS = 4, 56, 4294967296, 64
local HB = H + 8 * B
local HDR, ENT, SLOT = '<BBHIIIIIIdIIId', '<II', '<IId'
local hdr = redis.call('GETRANGE', key, 0, HB + CS - 1)
if #hdr == 0 then return 0 end
if #hdr < HB then return redis.error_reply('not a keyrate log') end
local v, lk, g, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last = struct.unpack(HDR, hdr)
if v ~= 1 and v ~= 2 then return redis.error_reply('unknown keyrate log version ' .. v) end
if v == 2 and #hdr < HB + CS then return redis.error_reply('not a keyrate log') end
if g ~= gen then return 0 end
if now < last then now = last end
local rb = HB
if v == 2 then rb = HB + CS end

-- The calendar counters: each of the decision's calendars gets n back
-- (what its count holds, at most) while the period the decision was made
-- in, which ends at the end the client sent, has not ended; a period that
-- turned since gives nothing back.
local calGave = false
if v == 2 and #cals > 0 then
  local sect, changed = {}, false
  for i = 0, 3 do
    local id, c, e = struct.unpack(SLOT, hdr, HB + 16 * i + 1)
    for _, cal in ipairs(cals) do
      if id ~= 0 and id == cal[1] and e == cal[2] and e > now and c > 0 then
        c, changed = c - math.min(n, c), true
        break
      end
    end
    sect[i + 1] = struct.pack(SLOT, id, c, e)
  end
  if changed then
    redis.call('SETRANGE', key, HB, table.concat(sect))
    calGave = true
  end
end

-- sliding gives n back to the log's entry the receipt names: 1 when it
-- did, 0 when the log holds no entry, -1 when not that one.
local function sliding()
if cnt == 0 then return 0 end
local ltick = 2 ^ lk
local lt = math.ceil(last / ltick)
local TN = lt + (tn - lt + 2147483648) % M - 2147483648
local R0, Rn = (TN - (tn - t0) % M) * ltick, TN * ltick
local E = math.ceil((decided + rid) / ltick) * ltick
if E <= now - wmax or E < R0 or E > Rn then return -1 end
local probed = {}
local function at(i)
  if i == 0 then return R0, c0 end
  if i == cnt - 1 then return Rn, total end
  local e = probed[i]
  if not e then
    local t, c
    if i >= rc then
      t, c = struct.unpack(ENT, hdr, H + 8 * (i - rc) + 1)
    else
      local p = head + i
      if p >= cap then p = p - cap end
      t, c = struct.unpack(ENT, redis.call('GETRANGE', key, rb + 8 * p, rb + 8 * p + 7))
    end
    e = {(TN - (tn - t) % M) * ltick, c}
    probed[i] = e
  end
  return e[1], e[2]
end
-- j, the entry at E: usually the newest.
local j = cnt - 1
if E < Rn then
  local lo, hi = 0, cnt - 1
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if at(mid) > E then hi = mid else lo = mid end
  end
  if at(lo) ~= E then return -1 end
  j = lo
end
local _, cj = at(j)
local cprev = base
if j > 0 then _, cprev = at(j - 1) end
if (cj - cprev) % M < n then return -1 end
local drop = (cj - cprev) % M == n

-- shift returns the entries s (as stored) with n taken from each running
-- total, the first entry left out when drop is set.
local function shift(s, drop)
  local parts, pos, t, c = {}, 1
  for i = 1, #s / 8 do
    t, c, pos = struct.unpack(ENT, s, pos)
    if not (drop and i == 1) then parts[#parts + 1] = struct.pack(ENT, t, (c - n) % M) end
  end
  return table.concat(parts)
end

local nb = cnt - rc
local buf = hdr:sub(H + 1, H + 8 * nb)
local removed = 0
if drop then removed = 1 end
if cnt == removed then
  redis.call('SETRANGE', key, 0, struct.pack(HDR, v, lk, g, cap, 0, 0, 0, 0, 0, expires, 0, 0, 0, last))
  return 1
end
-- The header's fields about the oldest and newest entries, from the
-- entries that will hold those places.
if j == 0 then
  if drop then
    local r1, c1 = at(1)
    c0, t0 = (c1 - n) % M, (r1 / ltick) % M
  else
    c0 = (c0 - n) % M
  end
end
if drop and j == cnt - 1 then
  tn = (at(j - 1) / ltick) % M
end
total = (total - n) % M
if j < rc then
  -- In the ring: its entries from j on move back a slot when the entry
  -- goes; the buffer's keep their places.
  local p, k = head + j, rc - j
  if p >= cap then p = p - cap end
  local s
  if p + k <= cap then
    s = redis.call('GETRANGE', key, rb + 8 * p, rb + 8 * (p + k) - 1)
  else
    s = redis.call('GETRANGE', key, rb + 8 * p, rb + 8 * cap - 1) ..
      redis.call('GETRANGE', key, rb, rb + 8 * (p + k - cap) - 1)
  end
  s = shift(s, drop)
  if #s > 0 then
    local m = #s / 8
    if p + m <= cap then
      redis.call('SETRANGE', key, rb + 8 * p, s)
    else
      redis.call('SETRANGE', key, rb + 8 * p, s:sub(1, 8 * (cap - p)))
      redis.call('SETRANGE', key, rb, s:sub(8 * (cap - p) + 1))
    end
  end
  rc = rc - removed
  buf = shift(buf, false)
else
  buf = buf:sub(1, 8 * (j - rc)) .. shift(buf:sub(8 * (j - rc) + 1), drop)
end
cnt = cnt - removed
redis.call('SETRANGE', key, 0, struct.pack(HDR, v, lk, g, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last) ..
  buf .. string.rep('\0', 8 * B - #buf))
return 1
end

local gave = 0
if wmax > 0 then gave = sliding() end
if calGave then return 1 end
if gave == 0 and #cals > 0 then return -1 end
return gave
`

// fixedWindowRefundSource takes n from the count of each window length
// (fixedwindow.go) of the decision's policies whose current window is the
// one the decision was made in, while it holds events: once a window has
// ended, its events are gone with it. Two policies of one length share a
// count, which gives back once. A window length of the key's tier now
// that the decision was not counted under is left alone: its count holds
// other decisions' events.
const fixedWindowRefundSource = refundPrologue + `
local function num(x) return string.format('%.0f', x) end
local fields, lens, seen = {'g', 'l'}, {}, {}
for i = 1, P do
  local w = num(windows[i])
  if not seen[w] then
    seen[w] = true
    lens[#lens + 1] = windows[i]
    fields[#fields + 1] = 'w' .. w
    fields[#fields + 1] = 'n' .. w
  end
end
local cur = redis.call('HMGET', key, unpack(fields))
if tonumber(cur[1]) ~= gen then return 0 end
local last = tonumber(cur[2])
if last and now < last then now = last end
local set = {'l', num(now)}
for i = 1, #lens do
  local w = lens[i]
  local x, c = tonumber(cur[1 + 2 * i]), tonumber(cur[2 + 2 * i]) or 0
  if x and x >= math.floor(now / w) and math.floor(decided / w) == x and c > 0 then
    set[#set + 1] = 'n' .. num(w)
    set[#set + 1] = c - math.min(n, c)
  end
end
if #set == 2 then return -1 end
redis.call('HSET', key, unpack(set))
return 1
`

// gcraRefundSource gives back, to each bucket of the decision's policies
// (gcra.go), the part of the decision's own tokens that the bucket has not
// refilled yet, and never more: a decision of weight N at instant at took
// the span [E - N*T, E] of its bucket's timeline, E being the TAT it left
// (at + the time until full, gcraFull) and T the bucket's refill interval,
// so a refund of
// n of it moves the TAT min(n*T, E - now) earlier, to now at the earliest;
// nothing once E has passed. Giving back n*T whatever the age of the
// decision would hand out tokens the bucket refilled long ago: under 1
// per second, a refund of a decision 10 s old would let two requests in
// at one instant.
//
// Refunds since the decision move its span earlier: those of the decision
// itself (RefundN, a part at a time) take its tail, and those of earlier
// decisions shift it whole. The script cannot tell them apart, so it
// takes E back by all of them: field r of the hash is the key's refund
// ledger, the weight given back since the hash was created, which the
// receipt carries as it stood at the decision (rid), and each refund
// counts E as E - (r - rid)*T. That is exact when only the decision's own
// refunds came between, and gives back less, never more, otherwise (as it
// does when later decisions queued behind this one). The ledger never
// wraps (gcra.go): a refund that would take it past the most a receipt
// holds gives nothing back, and a rid past the ledger names an earlier
// generation of the same number.
const gcraRefundSource = refundPrologue + `
local function num(x) return string.format('%.0f', x) end
local L = ` + maxLedger + `
local fields, T, E, seen = {'g', 'r', 'l'}, {}, {}, {}
for i = 1, P do
  local t, e = math.ceil(windows[i] / limits[i]), decided + resets[i]
  local j = seen[t]
  if not j then
    j = #T + 1
    seen[t], T[j], E[j] = j, t, e
    fields[#fields + 1] = 't' .. num(t)
  elseif e < E[j] then
    E[j] = e
  end
end
local cur = redis.call('HMGET', key, unpack(fields))
if tonumber(cur[1]) ~= gen then return 0 end
local ledger, last = tonumber(cur[2]) or 0, tonumber(cur[3])
if last and now < last then now = last end
local since = ledger - rid
if since < 0 then return 0 end
if ledger + n > L then return -1 end
local set = {}
for i = 1, #T do
  local tat = tonumber(cur[3 + i])
  local give = math.min(n * T[i], E[i] - since * T[i] - now)
  if tat and tat > now and give > 0 then
    set[#set + 1] = fields[3 + i]
    set[#set + 1] = num(math.max(tat - give, now))
  end
end
if #set == 0 then return -1 end
set[#set + 1] = 'r'
set[#set + 1] = num(ledger + n)
set[#set + 1] = 'l'
set[#set + 1] = num(now)
redis.call('HSET', key, unpack(set))
return 1
`

var (
	slidingLogRefundScript  = redis.NewScript(slidingLogRefundSource)
	fixedWindowRefundScript = redis.NewScript(fixedWindowRefundSource)
	gcraRefundScript        = redis.NewScript(gcraRefundSource)
)

// runBudgeted runs s within the Limiter's time budget, as TakeContext
// runs a decision: directly with a client that stops at ctx's deadline by
// itself, else from a goroutine it stops waiting for at the deadline.
func (l *Limiter) runBudgeted(ctx context.Context, s *redis.Script, keys []string, args []any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if l.direct {
		return s.Run(ctx, l.client, keys, args...).Int64()
	}
	type reply struct {
		v   int64
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := s.Run(ctx, l.client, keys, args...).Int64()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// fallbackRefund gives back the events the local fallback recorded for a
// decision it made while Redis could not answer: they are in the fallback,
// not in Redis.
func (l *Limiter) fallbackRefund(ctx context.Context, key, id string, d *keyrate.Decision, n int) error {
	if l.fallback == nil {
		return fmt.Errorf("redislimit: refund: %w: a fallback's decision, and this Limiter has no fallback", keyrate.ErrNothingToRefund)
	}
	if err := l.fallback.lim.RefundN(context.Background(), l.fallbackKey(l.tierFor(ctx, key), id), d, n); err != nil {
		return fmt.Errorf("redislimit: refund in the local fallback: %w", err)
	}
	return nil
}
