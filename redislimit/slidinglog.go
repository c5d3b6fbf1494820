package redislimit

import "github.com/redis/go-redis/v9"

// slidingLogSource keeps, per key, one sorted set with two entries per
// admitted event, whatever its weight. With s the total weight admitted for
// the key before the event (its start on a running total) and w its weight:
//
//	by time:   score t (the event's instant, > 0), member s in 13 hex digits
//	by weight: score -(s+w) (< 0), member "s:t:smin:age:ttl" in hex
//
// Each range is one index: the by-time entries find a window's oldest
// event (held = the running total at the newest event minus that event's
// start), and the by-weight entries find, in one lookup, the event whose
// leaving frees enough room for a refused weight (RetryAfter). Both are
// O(log N) in the events held, so a weight of a million costs what a weight
// of one does. Ties in time are broken by the member, and s has a fixed
// width there, so the order of members at one instant is the order of
// events.
//
// The entry with the lowest score is the newest event's by-weight entry,
// read first by every call. It carries the running total (its score), the
// newest instant t, and what the key looked like after that admission: the
// oldest event kept (its start smin and its age, t minus its instant) and
// how long after t the key is sure to live (ttl). While the oldest event is
// inside a policy's window, it is that window's oldest and the window holds
// total-smin: no lookup. So a call whose windows have lost nothing since
// the last admission reads one entry, and a refusal of weight 1 then costs
// that read alone. (Older events' by-weight entries keep the values of
// their day; only the newest's are read.) Members stay under 64 bytes, so
// small logs keep Redis's compact listpack encoding.
//
// Only admissions prune, and only events outside the longest window at the
// admission's instant: that instant becomes the newest, and a server clock
// that steps back is clamped to the newest, so no later decision can look
// further back. An admission sets the key to expire 1.5 windows ahead, and
// only when it would otherwise expire within a window: once per half
// window for a busy key, instead of on every admission.
//
// A decision that admits nothing writes nothing, with one exception: when
// the key would expire before its newest event leaves the longest window
// of the policies deciding now. That happens only after the policies
// changed (SetTier, or a key moving to a tier with a longer window) and
// before any admission under the new ones; the decision then sets the
// expiry an admission would have, and rewrites the newest entry to say so,
// so that the events the new policies count outlive their windows.
//
// Scores are passed to ZADD as Lua numbers: Redis writes them out exactly
// (they are integers below 2^53) and parses them back to the same doubles.
// Range bounds are built as strings with num, since Lua's own conversion
// keeps only 14 digits.
//
// Running totals stay below 2^52, where doubles (scores, Lua numbers) are
// exact: an admission that would cross it first shifts every kept event's
// totals down by smin. It costs O(N) once per 2^52 units admitted to a key
// that never went idle, and an idle key starts again from 0.
const slidingLogSource = prologue + `
local total, last, smin, oldest, expires = 0, nil, 0, nil, 0
local top = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
if top[1] then
  local _, t, m, age, ttl = string.match(top[1], '^(%x+):(%x+):(%x+):(%x+):(%x+)$')
  total = -tonumber(top[2])
  last = tonumber(t, 16)
  smin = tonumber(m, 16)
  oldest = last - tonumber(age, 16)
  expires = last + tonumber(ttl, 16)
  if now < last then now = last end
end
if now < 1 then now = 1 end
local held, from, first, seen = {}, {}, {}, {}
for i = 1, P do
  held[i] = 0
  local w = windows[i]
  if last and last > now - w then
    if oldest > now - w then
      from[i], first[i] = smin, oldest
    else
      local f = seen[w]
      if not f then
        f = redis.call('ZRANGEBYSCORE', key, '(' .. num(math.max(now - w, 0)), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        seen[w] = f
      end
      from[i] = tonumber(f[1], 16)
      first[i] = tonumber(f[2])
    end
    held[i] = total - from[i]
  end
end
local fits = n >= 0 and n <= lmin
local allowed = fits
for i = 1, P do
  if held[i] + n > limits[i] then allowed = false end
end
if n == 0 then allowed = true end
local out = {0, now}
if allowed and n > 0 then
  local keep = from[longest]
  if last and not keep then
    redis.call('DEL', key)
    total, oldest, expires = 0, nil, 0
  elseif keep and keep > smin then
    redis.call('ZREMRANGEBYSCORE', key, num(-keep), num(math.max(now - wmax, 0)))
    smin, oldest = keep, first[longest]
  end
  if total + n >= 4503599627370496 then
    local ts = redis.call('ZRANGEBYSCORE', key, '(0', '+inf', 'WITHSCORES')
    redis.call('DEL', key)
    local args = {}
    for j = 1, #ts, 2 do
      local s = tonumber(ts[j], 16) - smin
      local e = total - smin
      if ts[j + 2] then e = tonumber(ts[j + 2], 16) - smin end
      local t = tonumber(ts[j + 1])
      args[#args + 1] = num(t)
      args[#args + 1] = string.format('%013x', s)
      args[#args + 1] = num(-e)
      args[#args + 1] = string.format('%x:%x:0:0:0', s, t)
      if #args >= 1000 or not ts[j + 2] then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    total, smin, expires = total - smin, 0, 0
  end
  if not oldest then smin, oldest = total, now end
  local ttl = expires - now
  if ttl < wmax then ttl = math.ceil(wmax * 1.5 / 1000) * 1000 end
  redis.call('ZADD', key, now, string.format('%013x', total),
    -(total + n), string.format('%x:%x:%x:%x:%x', total, now, smin, now - oldest, ttl))
  if expires - now < wmax then redis.call('PEXPIRE', key, ttl / 1000) end
  out[1] = 1
  for i = 1, P do
    local refill = windows[i]
    if held[i] > 0 then refill = first[i] + windows[i] - now end
    out[#out + 1] = limits[i] - held[i] - n
    out[#out + 1] = 0
    out[#out + 1] = windows[i]
    out[#out + 1] = refill
  end
  return out
end
if allowed then out[1] = 1 end
if last and last > now - wmax and expires < last + wmax then
  -- The key would expire before its newest event leaves the longest
  -- window, as after a tier with a longer window replaced the one that
  -- last admitted: keep it as an admission would.
  local ttl = math.ceil(wmax * 1.5 / 1000) * 1000
  redis.call('ZADD', key, top[2], string.match(top[1], '^(%x+:%x+:%x+:%x+:)') .. string.format('%x', now - last + ttl))
  redis.call('ZREM', key, top[1])
  redis.call('PEXPIRE', key, ttl / 1000)
end
for i = 1, P do
  local remaining, retry, reset, refill = limits[i] - held[i], 0, 0, 0
  if remaining < 0 then remaining = 0 end
  if held[i] > 0 then
    reset = last + windows[i] - now
    refill = first[i] + windows[i] - now
  end
  if n > 0 and n <= limits[i] and held[i] + n > limits[i] then
    -- The oldest event carries at least one unit: a need of one is met
    -- when it leaves; a larger one by the event the running total finds.
    local need = held[i] + n - limits[i]
    local at = first[i]
    if need > 1 then
      local b = redis.call('ZREVRANGEBYSCORE', key, num(-(from[i] + need)), '-inf', 'LIMIT', 0, 1)
      at = tonumber(string.match(b[1], '^%x+:(%x+)'), 16)
    end
    retry = at + windows[i] - now
  end
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  out[#out + 1] = refill
end
return out
`

var slidingLogScript = redis.NewScript(slidingLogSource)
