package redislimit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keyrate/keyrate/backend"
	"github.com/redis/go-redis/v9"
)

// The decision scripts (slidinglog.go, fixedwindow.go, gcra.go) each
// decide a batch of requests in one run: every caller of a Limiter whose
// decision is waiting for the same Redis node (see batch.go), each
// request one key (TakeContext) or several decided all or nothing
// (TakeAll). They share one driver and one protocol:
//
//	KEYS     every key of every request, in order
//	ARGV[1]  the instant to decide at, in microseconds since the Unix
//	         epoch, or "" to read the server's TIME, once for the run (so
//	         that every client shares one clock; only tests pass an instant)
//	ARGV[2]  the resolution in microseconds, 0 for none (WithResolution;
//	         the fixed window and GCRA ignore it)
//	ARGV[3]  the number of tiers the requests name, then each tier: its
//	         number of policies P, then P limit, window pairs, windows in
//	         microseconds; a calendar policy's window is 0, followed by
//	         its calendar's id and four boundaries in microseconds (see
//	         calendar.go; the sliding log alone takes them)
//	then     each request: its number of keys K, then per key its weight n
//	         and the index of its tier (from 1); or a lease (lease.go): 0,
//	         then n, the most it may take, m, and its tier's index
//
// A request is admitted when every key of it has room for its weight, and
// then recorded against every key; else nothing is recorded, and each key
// is described at its weight when it had no room (a refusal, with
// RetryAfter), at 0 when it had (as it stands). Each key is decided at the
// later of the run's instant and the newest instant its state was decided
// at, which every decision keeps (so a server clock that steps back never
// decides before an instant a decision has pruned at: the sliding log's
// entries that left the window then, a fixed window that ended, a bucket
// refilled), as the in-process limiter decides at the newest instant it
// saw for the key. A decision of a key with state writes it once: the
// admission, or that newest instant; one of a key without state writes
// nothing, unless it admits.
//
// The rules for a weight are the in-process limiter's: n == 0 has room and
// records nothing; n < 0 has none (it can never fit, every retryAfter 0);
// n above a policy's limit has none, that policy's retryAfter 0. Each
// policy's retryAfter is 0 when it has room for n (or can never fit it),
// else how long until it has; which policy binds is left to the caller
// (backend.Combine).
//
// The reply is one string, each request's record in turn, little-endian:
//
//	status   uint8: 0 refused, 1 admitted, or an error (below)
//	then for 0 and 1, per key: now (the instant it was decided at), then
//	         per policy remaining, retryAfter, resetAfter and refillAfter,
//	         then gen and rid, each an int64, durations in microseconds
//	         and for a lease, then the weight granted (0 for a refusal)
//	or for an error, the index of the key at fault (uint16, from 1), then
//	         the error's text (its length, uint16, then the text)
//
// gen and rid make an admission's receipt (see refund.go): the generation
// of the key's state, and what the algorithm's refund needs besides: under
// the sliding log how much later than now its events were recorded (it
// rounds instants up), under GCRA the key's refund ledger, under the fixed
// window 0. Both are 0 when nothing was recorded. An error fails its
// request alone, never another of the run: the key holds something that
// is not this algorithm's state (Redis's WRONGTYPE, or the script's "not a
// keyrate log"), a log of an unknown version, or Redis refused a write (for
// want of memory, "OOM ..."). A request that fails at a write may have
// recorded some of its other keys: that only makes later decisions
// stricter. The writes of a decision that records nothing (the newest
// instant, the pruning) are left undone when Redis refuses them: they
// never fail it, so a key at its limit is refused on a Redis out of
// memory too.
//
// redis.replicate_commands lets a script that read TIME write afterwards on
// servers before 5.0, where scripts were replicated verbatim; from 5.0 on it
// is the default and the call is a no-op (pcall keeps servers that dropped
// the function working).
const (
	statusRefused = iota
	statusAdmitted
	statusError
)

// driverNow reads the instant, now0, and the resolution, res, which the
// algorithm's functions use; driverTiers then reads the tiers, calling
// the algorithm's prepare(tr) on each so that per-policy work (field
// names, ticks, refill intervals) is done once a run, not once a key.
const driverNow = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local now0 = ARGV[1] ~= '' and tonumber(ARGV[1]) or nil
if not now0 then
  local t = redis.call('TIME')
  now0 = t[1] * 1000000 + t[2]
end
local res = ARGV[2] + 0
local leasable, pre, fast
`

const driverTiers = `
-- Tiers are keyed by their index as ARGV writes it ('1'), and a count or
-- weight of '1' is taken as it stands: Lua turns a string into a number
-- with strtod, about 900 instructions of Redis's, where comparing two
-- strings compares two pointers.
local FMT = {'<i8i8i8i8i8i8i8', '<i8i8i8i8i8i8i8i8i8i8i8', '<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8', '<i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8i8'}
local tiers, a = {}, 4
for i = 1, tonumber(ARGV[3]) do
  local P = tonumber(ARGV[a])
  local limits, windows, cals, wmax, longest, lmin = {}, {}, false, 0, 1, math.huge
  a = a + 1
  for j = 1, P do
    local l, w = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    limits[j], windows[j], a = l, w, a + 2
    if w == 0 then
      -- A calendar policy: its id and boundaries.
      if not cals then cals = {} end
      cals[j] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])}
      a = a + 5
    elseif w > wmax then
      wmax, longest = w, j
    end
    if l < lmin then lmin = l end
  end
  tiers[tostring(i)] = prepare({P = P, limits = limits, windows = windows, cals = cals, wmax = wmax, longest = longest, lmin = lmin, fmt = FMT[P],
    k = 0, tick = 1, T = false, fields = false})
end
`

// driverTail decides each request with the algorithm's functions, which
// the algorithm's source defines between driverNow and driverTiers:
//
//   - load(key, n, tr) reads the state of key for tr's policies and
//     returns it as the key's table r, with r.key, r.n, r.tr and r.now,
//     the instant to decide at, or nil and an error's text;
//   - assess(r) works out each policy's part at weight r.n, and sets
//     r.room;
//   - admit(r) records r.n and returns the key's numbers, packed;
//   - describe(r, n) returns the key's numbers at weight n, packed,
//     recording nothing, and writes the instant it was decided at.
//
// admit and describe run under pcall, so that a write Redis refuses fails
// its request alone. A request of one key, the most common, takes a path
// of its own, with no table of keys, and first the algorithm's fast(...)
// when it sets one (the sliding log's, slidinglogone.go), which decides
// the common admission or returns nil. A request of several keys reads
// each key once, in order, and writes them in reverse (takeAll): fast
// checks a key it would decide, and writes it once every key after it has
// been found to have room (and written); any other key is loaded and
// assessed, then admitted or described once the keys after it are
// decided. A request of more than 1,000 keys, deeper than Lua's calls
// nest, is decided by the general code alone (takeMany).
const driverTail = `
local reply, ki, na = {}, 1, #ARGV
-- The request of several keys being decided: its TK keys from KEYS[ki],
-- its weights and tiers from ARGV[a], its records in rec (the status
-- first), and, once a key fails, the error and the key's index; and the
-- functions that decide it, made at the run's first such request (Lua
-- makes a closure each time its definition runs).
local TK, rec, fail, at, takeAll, takeMany
while a <= na do
  local K = ARGV[a]
  a = a + 1
  if K == '0' then
    -- A lease: one key, at least n and at most m, as leasable grants.
    local n, m, tr = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tiers[ARGV[a + 2]]
    local r, err = load(KEYS[ki], n, tr)
    ki, a = ki + 1, a + 3
    if r and not leasable then r, err = nil, 'leases need the sliding log' end
    if not r then
      reply[#reply + 1] = struct.pack('<BHH', 2, 1, #err) .. err
    else
      assess(r)
      local ok, s
      if r.room and n > 0 then
        r.n = leasable(r, m)
        ok, s = pcall(admit, r)
      else
        ok, s = pcall(describe, r, n)
      end
      if not ok then
        s = tostring(type(s) == 'table' and s.err or s)
        reply[#reply + 1] = struct.pack('<BHH', 2, 1, #s) .. s
      elseif r.room and n > 0 then
        reply[#reply + 1] = '\1' .. s .. struct.pack('<i8', r.n)
      else
        reply[#reply + 1] = '\0' .. s .. struct.pack('<i8', 0)
      end
    end
  elseif K == '1' then
    local n, tr = ARGV[a], tiers[ARGV[a + 1]]
    if n == '1' then n = 1 else n = n + 0 end
    local s, r, err
    if fast and not tr.cals then s, err = fast(KEYS[ki], n, tr.P, tr.fl, tr.fw, tr.wmax, tr.lmin, tr.k, tr.tick, true) end
    if s == nil then r, err = load(KEYS[ki], n, tr) end
    ki, a = ki + 1, a + 2
    if s then
      reply[#reply + 1] = s
    elseif s == false then
      reply[#reply + 1] = struct.pack('<BHH', 2, 1, #err) .. err
    elseif not r then
      reply[#reply + 1] = struct.pack('<BHH', 2, 1, #err) .. err
    else
      assess(r)
      local ok, s
      if not r.room then
        ok, s = pcall(describe, r, r.n)
      elseif r.n > 0 then
        ok, s = pcall(admit, r)
      else
        ok, s = pcall(describe, r, 0)
      end
      if not ok then
        s = tostring(type(s) == 'table' and s.err or s)
        reply[#reply + 1] = struct.pack('<BHH', 2, 1, #s) .. s
      elseif r.room then
        reply[#reply + 1] = '\1' .. s
      else
        reply[#reply + 1] = '\0' .. s
      end
    end
  else
    if not takeAll then
      -- keyAt returns key j of the request, its weight and its tier.
      local function keyAt(j)
        local n = ARGV[a + 2 * j - 2]
        if n == '1' then n = 1 else n = n + 0 end
        return KEYS[ki + j - 1], n, tiers[ARGV[a + 2 * j - 1]]
      end
      -- settle admits key j, loaded and assessed as r, when the request was
      -- admitted, else describes it, and records it; it returns false when
      -- that failed.
      local function settle(j, r, admitted)
        local ok, s
        if admitted and r.n > 0 then
          ok, s = pcall(admit, r)
        elseif admitted or r.room then
          ok, s = pcall(describe, r, 0)
        else
          ok, s = pcall(describe, r, r.n)
        end
        if not ok then fail, at = tostring(type(s) == 'table' and s.err or s), j return false end
        rec[j + 1] = s
        return true
      end
      -- takeAll decides key j of the request and, through it, every key after
      -- it (refused: a key before j had no room), and returns whether the
      -- request was admitted, or nil when a key failed. Each key is read
      -- once, in order. A key fast would decide, fast checks, then has
      -- takeAll decide the next before it writes, so that it writes only once
      -- every key after it had room; any other key is loaded and assessed,
      -- the keys after it decided, then it is settled. So the keys are
      -- checked in order, and written in reverse: a key that fails leaves
      -- every key before it as it was.
      takeAll = function(j, refused)
        if j > TK then return not refused end
        local key, n, tr = keyAt(j)
        local h = fast and not refused and not tr.cals and redis.pcall('GETRANGE', key, '0', '151')
        local s, err, r, admitted
        if h then
          s, err = fast(key, n, tr.P, tr.fl, tr.fw, tr.wmax, tr.lmin, tr.k, tr.tick, false, h, takeAll, j + 1)
          if s == false then fail, at = err, j return nil end
          if s and s ~= true then rec[j + 1] = s return true end
          -- fast declined it (nil), or found it had room while a key after it
          -- had none or failed (true): the general code describes it.
          if s and fail then return nil end
          pre = h
        end
        r, err = load(key, n, tr)
        if not r then fail, at = err, j return nil end
        assess(r)
        if s then
          admitted = false
        else
          admitted = takeAll(j + 1, refused or not r.room)
          if admitted == nil then return nil end
        end
        if not settle(j, r, admitted) then return nil end
        return admitted
      end
      -- takeMany decides a request of more keys than Lua's calls nest to
      -- (takeAll's two a key), by the general code alone: every key loaded
      -- and assessed, in order, then each settled.
      takeMany = function()
        local rs, admitted = {}, true
        for j = 1, TK do
          local r, err = load(keyAt(j))
          if not r then fail, at = err, j return nil end
          assess(r)
          admitted = admitted and r.room
          rs[j] = r
        end
        for j = 1, TK do
          if not settle(j, rs[j], admitted) then return nil end
        end
        return admitted
      end
    end
    TK, rec, fail, at = K + 0, {''}, nil, 0
    local admitted
    if TK <= 1000 then admitted = takeAll(1, false) else admitted = takeMany() end
    ki, a = ki + TK, a + 2 * TK
    if fail then
      reply[#reply + 1] = struct.pack('<BHH', 2, at, #fail) .. fail
    else
      if admitted then rec[1] = '\1' else rec[1] = '\0' end
      reply[#reply + 1] = table.concat(rec)
    end
  end
end
return table.concat(reply)
`

// decisionScript returns the batch script of an algorithm whose source
// defines prepare, load, assess, admit and describe.
func decisionScript(algorithm string) *script {
	return newScript(driverNow + algorithm + driverTiers + driverTail)
}

// slidingLogBatch is the sliding log's batch script, with its fast path
// (slidinglogone.go).
func slidingLogBatch() *script {
	return newScript(driverNow + slidingLogRing + slidingLogFast + slidingLogSource + driverTiers + driverTail)
}

// keyReply is one key's part of a request's record: the instant it was
// decided at, and each policy's remaining, retryAfter, resetAfter and
// refillAfter, then gen and rid (see above), in microseconds.
type keyReply []int64

func (v keyReply) now() int64 { return v[0] }
func (v keyReply) gen() int64 { return v[len(v)-2] }
func (v keyReply) rid() int64 { return v[len(v)-1] }

// policy returns policy i's remaining, retryAfter, resetAfter and
// refillAfter.
func (v keyReply) policy(i int) []int64 { return v[1+4*i : 5+4*i] }

// scriptError is an error reply for one request of a batch: Redis's own
// (WRONGTYPE, OOM) or the script's. It is a redis.Error, so the breaker
// counts it as an answer, and no fallback answers it (but OOM): it needs
// fixing, not riding out.
type scriptError struct{ msg string }

func (e *scriptError) Error() string { return e.msg }

// RedisError makes a scriptError a redis.Error.
func (e *scriptError) RedisError() {}

// parseRecord reads the record of a request of len(policies) keys, key i
// under policies[i] policies, from the start of b; a lease's (one key)
// ends with the weight granted, which its keyReply keeps last. It returns whether
// the request was admitted, each key's reply, and the rest of b; a
// request the script failed gives an error naming its key by index (from
// 0), and one that b cannot hold, an error saying so.
func parseRecord(b []byte, policies []int, lease bool) (admitted bool, keys []keyReply, rest []byte, failedAt int, err error) {
	if len(b) < 1 {
		return false, nil, nil, -1, errors.New("the script's reply ended early")
	}
	status := b[0]
	b = b[1:]
	switch status {
	case statusRefused, statusAdmitted:
	case statusError:
		if len(b) < 4 || len(b) < 4+int(binary.LittleEndian.Uint16(b[2:])) {
			return false, nil, nil, -1, errors.New("the script's reply ended early")
		}
		at, n := int(binary.LittleEndian.Uint16(b))-1, int(binary.LittleEndian.Uint16(b[2:]))
		err = &scriptError{string(b[4 : 4+n])}
		if redis.HasErrorPrefix(err, "OOM") {
			err = fmt.Errorf("%w: %w", backend.ErrOutOfMemory, err)
		}
		return false, nil, b[4+n:], at, err
	default:
		return false, nil, nil, -1, fmt.Errorf("the script's reply has status %d", status)
	}
	keys = make([]keyReply, len(policies))
	for i, p := range policies {
		n := 3 + 4*p
		if lease && i == len(policies)-1 {
			n++ // the weight granted
		}
		if len(b) < 8*n {
			return false, nil, nil, -1, errors.New("the script's reply ended early")
		}
		v := make(keyReply, n)
		for j := range v {
			v[j] = int64(binary.LittleEndian.Uint64(b[8*j:]))
		}
		keys[i], b = v, b[8*n:]
	}
	return status == statusAdmitted, keys, b, -1, nil
}

// runTiers returns the tiers reqs name, in the order they first name
// them (the scripts number them so, from 1), in seen where they fit: a run
// names few, and the array keeps them off the heap.
func runTiers(seen *[4]*tier, reqs []*request) []*tier {
	tiers := seen[:0]
	for _, r := range reqs {
		for _, t := range r.tiers {
			if !slices.Contains(tiers, t) {
				tiers = append(tiers, t)
			}
		}
	}
	return tiers
}

// argvLen returns the length of the ARGV appendArgs makes of reqs, which
// name tiers (see runTiers).
func argvLen(tiers []*tier, reqs []*request) int {
	n := 3
	for _, t := range tiers {
		n += 1 + len(t.args)
		for _, id := range t.ids {
			if id != 0 {
				n += 5 // the id and four boundaries
			}
		}
	}
	for _, r := range reqs {
		if r.lease > 0 {
			n += 4
		} else {
			n += 1 + 2*len(r.keys)
		}
	}
	return n
}

// appendArgs appends to args the ARGV of a batch of requests: the
// instant (instant, "" for the server's TIME), the resolution, the tiers
// the requests name (their calendar policies' boundaries around the
// client's instant wall), then each request's keys' weights and tiers.
// tiers are those reqs name (see runTiers); with room for argvLen more,
// args does not grow.
func appendArgs(args []any, instant any, res int64, wall time.Time, tiers []*tier, reqs []*request) []any {
	args = append(args, instant, res, len(tiers))
	for _, t := range tiers {
		args = append(args, len(t.policies))
		if !t.calendar {
			args = append(args, t.args...)
			continue
		}
		for i, p := range t.policies {
			args = append(args, t.args[2*i], t.args[2*i+1])
			if t.ids[i] != 0 {
				args = appendBoundaries(append(args, int64(t.ids[i])), p.Calendar, wall)
			}
		}
	}
	index := func(t *tier) int { return slices.Index(tiers, t) + 1 }
	for _, r := range reqs {
		if r.lease > 0 {
			args = append(args, 0, r.weights[0], r.lease, index(r.tiers[0]))
			continue
		}
		args = append(args, len(r.keys))
		for i := range r.keys {
			args = append(args, r.weights[i], index(r.tiers[i]))
		}
	}
	return args
}

// readNow reads what every refund script takes first: the key, the weight
// n and the instant now, from ARGV[2] or else the server's TIME.
const readNow = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`
