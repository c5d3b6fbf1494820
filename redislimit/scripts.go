package redislimit

import "github.com/redis/go-redis/v9"

// Both scripts take KEYS[1], the key's state, and ARGV limit, window (in
// microseconds), weight n and, optionally, the instant to decide at in
// microseconds since the Unix epoch. Without that instant they read the
// server's TIME, so that every client shares one clock. Each returns
// {allowed (0 or 1), remaining, retryAfter, resetAfter, refillAfter},
// durations in microseconds, with the same rules as the in-process limiter: n == 0 is
// allowed and records nothing; n < 0 or n > limit is refused with
// retryAfter 0; a refusal records nothing.
//
// redis.replicate_commands lets a script that read TIME write afterwards on
// servers before 5.0, where scripts were replicated verbatim; from 5.0 on it
// is the default and the call is a no-op (pcall keeps servers that dropped
// the function working).

// prologue reads the arguments both scripts share, and the instant to
// decide at.
const prologue = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local now = tonumber(ARGV[4] or '')
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// slidingLogSource keeps, per key, a sorted set with one member per admitted
// event scored by its instant. Members are a per-key sequence number in
// fixed-width hex, so two events in the same microsecond stay distinct and
// the lexicographically greatest member among equal scores is the newest:
// ZRANGE -1 -1 returns both the newest instant and the last sequence number.
// A server clock that steps back is clamped to the newest event, which can
// only make the decision stricter. Events are pruned only once they have
// left the newest event's window, not the window at now: a call at a later
// instant must not delete events that a call after a backwards step still
// has to count. Those few stale members are skipped by counting from now.
const slidingLogSource = prologue + `
local seq, newest = 0, 0
local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if top[1] then
  seq = tonumber(top[1], 16) or 0
  newest = tonumber(top[2])
  if now < newest then now = newest end
end
local from = '(' .. string.format('%.0f', now - window)
if top[1] then redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', newest - window)) end
local held = redis.call('ZCOUNT', key, from, '+inf')
local remaining = limit - held
local refill = 0
if held > 0 then
  local oldest = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  refill = tonumber(oldest[2]) + window - now
end
if n > 0 and n <= limit and held + n <= limit then
  local score = string.format('%.0f', now)
  local i = 1
  while i <= n do
    local last = math.min(i + 499, n)
    local args = {}
    for j = i, last do
      args[#args + 1] = score
      args[#args + 1] = string.format('%016x', seq + j)
    end
    redis.call('ZADD', key, unpack(args))
    i = last + 1
  end
  redis.call('PEXPIRE', key, math.ceil(window / 1000))
  if held == 0 then refill = window end
  return {1, remaining - n, 0, window, refill}
end
local retry, reset = 0, 0
if n > 0 and n <= limit then
  local k = held + n - limit - 1
  local blocking = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', k, 1)
  retry = tonumber(blocking[2]) + window - now
end
if held > 0 then reset = newest + window - now end
if n == 0 then return {1, remaining, 0, reset, refill} end
return {0, remaining, retry, reset, refill}
`

// fixedWindowSource keeps, per key, a hash {w: window number, n: count}.
// Windows are aligned to multiples of the window length since the Unix
// epoch. The count starts over when the window number changes; the key
// expires with its window (expiry set only when the window starts). A clock
// that steps back stays in the newest window seen. All of a window's events
// leave together when it ends, so refillAfter equals resetAfter.
const fixedWindowSource = prologue + `
local idx = math.floor(now / window)
local count = 0
local cur = redis.call('HMGET', key, 'w', 'n')
local w = tonumber(cur[1])
if w then
  if w > idx then idx = w end
  if w == idx then count = tonumber(cur[2]) or 0 end
end
local left = (idx + 1) * window - now
local remaining = limit - count
if n > 0 and n <= limit and count + n <= limit then
  if count == 0 then
    redis.call('HSET', key, 'w', string.format('%.0f', idx), 'n', n)
    redis.call('PEXPIRE', key, math.ceil(left / 1000))
  else
    redis.call('HINCRBY', key, 'n', n)
  end
  return {1, remaining - n, 0, left, left}
end
local retry, reset = 0, 0
if n > 0 and n <= limit then retry = left end
if count > 0 then reset = left end
if n == 0 then return {1, remaining, 0, reset, reset} end
return {0, remaining, retry, reset, reset}
`

var (
	slidingLogScript  = redis.NewScript(slidingLogSource)
	fixedWindowScript = redis.NewScript(fixedWindowSource)
)
