package redislimit

// The decision scripts (slidinglog.go, fixedwindow.go, gcra.go) speak one
// protocol, built for several policies (limits over windows of different
// lengths) kept under one key, decided together:
//
//	KEYS[1]  the key's state
//	KEYS[2]  the sliding log only: the key's state in the sorted-set
//	         layout of earlier releases, merged in when present (see
//	         legacy.go); in the same hash tag, so in the same Cluster slot
//	ARGV[1]  the weight n
//	ARGV[2]  the instant to decide at, in microseconds since the Unix epoch,
//	         or "" to read the server's TIME (so that every client shares
//	         one clock; only tests pass an instant)
//	ARGV[3]  the resolution in microseconds, 0 for none (WithResolution;
//	         the fixed window and GCRA have none and ignore it)
//	ARGV[4:] limit, window pairs, one per policy, windows in microseconds
//
// Each returns {allowed (0 or 1), now, then per policy: remaining,
// retryAfter, resetAfter, refillAfter, then gen, rid}, durations in
// microseconds and now the instant the decision was taken at (the
// server's, clamped as below). gen and rid make an admission's receipt
// (see refund.go): the generation of the key's state, and what the
// algorithm's refund needs besides: under the sliding log how much later
// than now its events were recorded (it rounds instants up), under GCRA
// the key's refund ledger, under the fixed window 0. Both are 0 when
// nothing was recorded.
// The rules are the in-process limiter's: n == 0 is allowed and records
// nothing; n < 0 is refused with every retryAfter 0 (it can never fit); n
// above a policy's limit is refused, with that policy's retryAfter 0; a
// refusal records nothing; a request is admitted only when it fits every
// policy, and then counts against all. Each policy's retryAfter is 0 when
// it has room for n (or can never fit it), else how long until it has; a
// request that can fit does once the longest of them has passed. Which
// policy binds is left to the caller (keyrate.Combine).
//
// redis.replicate_commands lets a script that read TIME write afterwards on
// servers before 5.0, where scripts were replicated verbatim; from 5.0 on it
// is the default and the call is a no-op (pcall keeps servers that dropped
// the function working).

// readNow reads what every script, decision or refund, takes first: the
// key, the weight n and the instant now, from ARGV[2] or else the server's
// TIME.
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

// prologue reads the arguments the decision scripts share, and the
// instant to decide at. It leaves the resolution in res, P policies in
// limits and windows, the longest window in wmax (its policy's index in
// longest) and the lowest limit in lmin.
const prologue = readNow + `
local res = tonumber(ARGV[3])
local P = (#ARGV - 3) / 2
local limits, windows = {}, {}
local wmax, longest, lmin = 0, 1, math.huge
for i = 1, P do
  limits[i] = tonumber(ARGV[2 + 2 * i])
  windows[i] = tonumber(ARGV[3 + 2 * i])
  if windows[i] > wmax then wmax, longest = windows[i], i end
  if limits[i] < lmin then lmin = limits[i] end
end
`
