package redislimit

import "github.com/redis/go-redis/v9"

// legacyLogSource is the sliding log script of the sorted-set layout that
// the string log replaced, kept verbatim (its prologue included) as a
// fixture: the upgrade tests write keys with it, as a replica running the
// previous release would, and check that the current script counts every
// event it admitted. Its protocol is the current one without the
// resolution argument: KEYS[1] the sorted set, ARGV[1] the weight, ARGV[2]
// the instant, ARGV[3:] limit, window pairs.
const legacyLogSource = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local n = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local P = (#ARGV - 2) / 2
local limits, windows = {}, {}
local wmax, longest, lmin = 0, 1, math.huge
for i = 1, P do
  limits[i] = tonumber(ARGV[1 + 2 * i])
  windows[i] = tonumber(ARGV[2 + 2 * i])
  if windows[i] > wmax then wmax, longest = windows[i], i end
  if limits[i] < lmin then lmin = limits[i] end
end
local function num(x) return string.format('%.0f', x) end

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

var legacyLogScript = redis.NewScript(legacyLogSource)
