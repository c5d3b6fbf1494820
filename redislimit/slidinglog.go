package redislimit

import "github.com/redis/go-redis/v9"

// slidingLogSource keeps, per key, one Redis string: a 56-byte header, a
// buffer of the newest entries (up to B, 4), then a ring of cap entries.
// An entry stands for the events admitted at one instant:
//
//	tick   uint32  the instant in ticks, mod 2^32
//	total  uint32  the running total of weight admitted, up to and
//	               including this entry's, mod 2^32
//
// The header holds, little-endian (Redis's Lua struct library packs and
// unpacks it): version uint8 (1), k uint8 (ticks are 2^k µs), gen uint16
// (the log's generation, drawn when the log is created: a receipt names
// it, so that a refund does not apply to another key's log or a later one
// of the same key, see refund.go); cap, head (the ring index of its oldest
// entry), rc (the entries in the ring), base (the running total before
// the oldest entry), and the oldest entry's total and tick, all uint32;
// expires float64 (an instant the key is sure to live until, µs); then
// what an append changes: cnt (the entries held, ring and buffer), the
// newest entry's total and tick (uint32), and last float64 (the newest
// admission's instant, µs). Instants are float64s, exact below 2^53 µs
// (the year 2255). The entries, oldest first, are the ring's rc from head,
// then the buffer's cnt-rc.
//
// An entry's weight is its total minus the one before it, so the weight a
// window holds is one subtraction, and the entry whose leaving frees room
// for a refused weight is a binary search on totals, whatever the weights:
// a weight of a million is one entry, as are all the events of one
// instant. One GETRANGE reads the header and the buffer, so the oldest
// entry, the newest and the buffer's cost no further read; a decision whose
// windows have lost nothing since the last admission reads nothing else. A
// policy whose window did lose events finds its oldest by binary search,
// with a GETRANGE per ring entry probed, trying the entry after the oldest
// first (the one usually next to leave): O(log N).
//
// Instants are rounded up to a tick of 2^k µs, the smallest in which the
// longest window is under 2^31-1 ticks (1 µs for windows up to 35 minutes,
// 64 µs for a day), and stored mod 2^32. An entry's instant is recovered
// from the newest's, which last pins down: every entry held is within a
// longest window and a resolution of the newest, so under 2^32 ticks older,
// and the newest is within 2^31 ticks of last, after it by at most a
// resolution and a tick when last admitted, or before it by under a
// longest window once refunds have taken the entries after it.
// Rounding up treats an event as later than it was, never earlier: a
// window holds at least what it held in real time, so no window of real
// instants is ever over its limit, and RetryAfter is at most a tick late.
// WithResolution(d) rounds each instant up to a multiple of d first, so the
// events of one tick of d share an entry: at most about longest window / d
// + 2 entries, whatever the limit. A log whose tick changes (a tier with a
// much longer or shorter longest window) is rewritten in the new tick at
// its next admission. Only admissions prune, and only what has left the
// longest window of the policies deciding now: the head moves past it in
// O(1), and once the newest entry has left, the whole log goes at once. A
// server clock that steps back is clamped to last, so no decision looks
// further back than an admission has pruned.
//
// An append puts its entry in the buffer, or adds its weight to the newest
// entry when both round to one instant, and writes the fields it changed
// with the buffer: one SETRANGE, as they are contiguous. When the buffer is
// full, its entries move to the ring's tail first (one SETRANGE more, once
// per B appends). A new key is a header and a buffer, 88 bytes, with no
// ring. When the ring has no room for the buffer, it grows to about twice
// its capacity, up to the most entries the longest window can hold (its
// limit, or what the resolution allows); when it is a quarter full, it
// shrinks to about twice its entries. Either rewrites the string whole,
// copying the entries as they are, once per doubling or halving of the
// entries held: O(1) per admission on average. Capacities fill Redis's
// allocation, which rounds up to size classes of four per doubling
// (jemalloc's), so a key costs 8 bytes per entry held and a few percent:
// 8,192 bytes of string for a limit of 1,000.
//
// Expiry: an admission sets the key to expire 1.5 windows after its newest
// entry when it would otherwise expire within a window of it (once per half
// window for a busy key; a rewrite of the string keeps the expiry it had
// otherwise, and a new log always sets one). A decision that admits
// nothing writes nothing, with one exception: when the key would expire
// before its newest entry leaves the longest window of the policies
// deciding now (after a SetTier, or a key moving to a tier with a longer
// window), the decision sets the expiry an admission would have, and the
// header's expires.
//
// The running totals are mod 2^32: after an admission the log holds at
// most the longest policy's limit, below 2^31, and a refusal adds nothing,
// so differences of totals are never ambiguous.
//
// Each decision also asks whether the sorted set of earlier releases exists
// (one EXISTS), and merges it in if so: see legacy.go.
const slidingLogSource = prologue + `
local old = KEYS[2]
local B, H, M = 4, 56, 4294967296
local HB = H + 8 * B
local HDR, HOT, ENT = '<BBHIIIIIIdIIId', '<IIId', '<II'
local k, tick = 0, 1
while wmax >= 2147483647 * tick do k, tick = k + 1, tick * 2 end

local lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last = k, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
local hdr = redis.call('GETRANGE', key, 0, HB - 1)
if #hdr == HB then
  local v
  v, lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last = struct.unpack(HDR, hdr)
  if v ~= 1 then return redis.error_reply('unknown keyrate log version ' .. v) end
elseif #hdr > 0 then
  return redis.error_reply('not a keyrate log')
else
  gen = ` + newGen + `
end

-- ltick is the log's tick, TN the newest entry's tick, whole, and R0 and Rn
-- the oldest and newest entries' instants: an entry's instant is its tick's
-- distance back from TN, in ticks.
local ltick, TN, R0, Rn = 2 ^ lk, 0, 0, 0
if cnt > 0 then
  local lt = math.ceil(last / ltick)
  TN = lt + (tn - lt + 2147483648) % M - 2147483648
  R0, Rn = (TN - (tn - t0) % M) * ltick, TN * ltick
end

local at
if redis.call('EXISTS', old) == 1 then
` + rewriteHelpers + mergeLegacySource + `
end
if #hdr == HB and now < last then now = last end

-- For each policy i, in w[4i-3] to w[4i]: the weight its window holds,
-- the index of the oldest entry in it (nil when none is), that entry's
-- instant, and the running total before it. The oldest entry of the log
-- answers for every window it is in; the others search, trying the entry
-- after the oldest first: usually the next to leave.
local w = {}
for i = 1, P do
  local h = now - windows[i]
  w[4 * i - 3] = 0
  if cnt > 0 and Rn > h then
    if R0 > h then
      w[4 * i - 2], w[4 * i - 1], w[4 * i] = 0, R0, base
    else
` + probeHelper + `
      local lo, hi, mid = 0, cnt - 1, 1
      while hi - lo > 1 do
        if at(mid) > h then hi = mid else lo = mid end
        mid = math.floor((lo + hi) / 2)
      end
      w[4 * i - 2], w[4 * i - 1] = hi, at(hi)
      local _, c = at(lo)
      w[4 * i] = c
    end
    w[4 * i - 3] = (total - w[4 * i]) % M
  end
end
local allowed = n >= 0 and n <= lmin
for i = 1, P do
  if w[4 * i - 3] + n > limits[i] then allowed = false end
end
if n == 0 then allowed = true end
local out = {0, now, 0, 0, 0, 0}

if allowed and n > 0 then
  -- What has left the longest window goes: from the ring's head, then
  -- from the buffer's (skip), or all of it at once.
  local j, fixed, skip = w[4 * longest - 2], false, 0
  if not j then
    cnt, rc = 0, 0
  elseif j > 0 then
    local r, c = at(j)
    if j <= rc then
      head, rc = head + j, rc - j
      if head >= cap then head = head - cap end
    else
      skip, head, rc = j - rc, 0, 0
    end
    cnt, base, R0, c0, t0, fixed = cnt - j, w[4 * longest], r, c, (r / ltick) % M, true
  end
  if cnt == 0 then base, total = 0, 0 end
  local nb = cnt - rc
  local buf = hdr:sub(H + 8 * skip + 1, H + 8 * (skip + nb))
  -- The instant recorded: rounded up, and never before the newest entry,
  -- which a client with a coarser resolution may have put later.
  local R = now
  if res > 0 then R = math.ceil(R / res) * res end
  R = math.ceil(R / tick) * tick
  if cnt > 0 and R < Rn then R = math.ceil(Rn / tick) * tick end
  last = now
  local ttl
  if expires < R + wmax or cnt == 0 then
    ttl = math.ceil((R - now + wmax * 1.5) / 1000) * 1000
    expires, fixed = now + ttl, true
  end
  local merge = cnt > 0 and lk == k and R == Rn
  local m = cnt
  if not merge then m = cnt + 1 end
  local c = (total + n) % M
  local e = struct.pack(ENT, (R / tick) % M, c)
  if cnt == 0 then
    -- A new log, of a generation of its own: the entry in the buffer, no
    -- ring.
    gen = ` + newGen + `
    local s = struct.pack(HDR, 1, k, gen, 0, 0, 0, 0, c, (R / tick) % M, expires, 1, c, (R / tick) % M, last) ..
      e .. string.rep('\0', 8 * (B - 1))
    redis.call('SET', key, s, 'PX', ttl / 1000)
  elseif lk ~= k or (not merge and nb == B and rc + B > cap) or (cap > 8 and rc <= cap / 4) then
    -- Rewrite the log whole, in the tick of the policies deciding now,
    -- with room for twice the entries (at most what the longest window
    -- can hold), or half when a quarter full.
` + rewriteHelpers + `
    local px = ttl and ttl / 1000
    if not px then
      px = redis.call('PTTL', key)
      if px < 0 then px = nil end
    end
    local s
    if lk ~= k then
      -- Instants round up to the new tick; entries that meet merge.
      local ins, cs = ring(buf)
      local parts, r0 = {}
      for i = 1, #ins do
        local r = math.ceil(ins[i] / tick) * tick
        if r == r0 then parts[#parts] = nil end
        parts[#parts + 1], r0 = struct.pack(ENT, (r / tick) % M, cs[i]), r
      end
      if R == r0 then parts[#parts] = nil end
      parts[#parts + 1] = e
      s, m = table.concat(parts), #parts
    else
      s = ringBytes() .. buf
      if merge then s = s:sub(1, -9) end
      s = s .. e
    end
    local bound = limits[longest]
    if res > 0 then bound = math.min(bound, math.floor(wmax / res) + 2) end
    local want = math.max(m, math.min(math.max(m + B, 2 * cap), bound))
    if want > 8 and m <= want / 4 then want = 2 * m end
    write(s, m, base, want, px)
  else
    -- In place: the entry joins the buffer (flushed into the ring when
    -- full) or, when the newest entry is in the ring, replaces it there;
    -- then the header's fields that changed and the buffer, in one write.
    local tail = buf .. e
    if merge and nb == 0 then
      local p = head + rc - 1
      if p >= cap then p = p - cap end
      redis.call('SETRANGE', key, HB + 8 * p, e)
      tail = ''
    elseif merge then
      tail = buf:sub(1, -9) .. e
    elseif nb == B then
      local p = head + rc
      if p >= cap then p = p - cap end
      if p + B <= cap then
        redis.call('SETRANGE', key, HB + 8 * p, buf)
      else
        redis.call('SETRANGE', key, HB + 8 * p, buf:sub(1, 8 * (cap - p)))
        redis.call('SETRANGE', key, HB, buf:sub(8 * (cap - p) + 1))
      end
      rc, tail, fixed = rc + B, e, true
    end
    cnt, total, tn = m, c, (R / tick) % M
    if cnt == 1 then c0, t0, fixed = total, tn, true end
    if fixed then
      redis.call('SETRANGE', key, 0, struct.pack(HDR, 1, lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last) .. tail)
    else
      redis.call('SETRANGE', key, 36, struct.pack(HOT, cnt, total, tn, last) .. tail)
    end
    if ttl then redis.call('PEXPIRE', key, ttl / 1000) end
  end
  out[1] = 1
  for i = 1, P do
    local refill = R + windows[i] - now
    if w[4 * i - 3] > 0 then refill = w[4 * i - 1] + windows[i] - now end
    out[4 * i - 1] = limits[i] - w[4 * i - 3] - n
    out[4 * i] = 0
    out[4 * i + 1] = R + windows[i] - now
    out[4 * i + 2] = refill
  end
  out[3 + 4 * P], out[4 + 4 * P] = gen, R - now
  return out
end
if allowed then out[1] = 1 end
if cnt > 0 and Rn > now - wmax and expires < Rn + wmax then
  -- The key would expire before its newest entry leaves the longest
  -- window, as after a tier with a longer window replaced the one that
  -- last admitted: keep it as an admission would.
  local ttl = math.ceil((math.max(Rn, now) - now + wmax * 1.5) / 1000) * 1000
  expires = now + ttl
  redis.call('SETRANGE', key, 0, struct.pack(HDR, 1, lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last))
  redis.call('PEXPIRE', key, ttl / 1000)
end
for i = 1, P do
  local held, first, from = w[4 * i - 3], w[4 * i - 2], w[4 * i]
  local remaining, retry, reset, refill = limits[i] - held, 0, 0, 0
  if remaining < 0 then remaining = 0 end
  if held > 0 then
    reset = Rn + windows[i] - now
    refill = w[4 * i - 1] + windows[i] - now
  end
  if n > 0 and n <= limits[i] and held + n > limits[i] then
    -- The request fits once the entries up to the first whose running
    -- total since the window's start reaches need have left: usually the
    -- window's oldest, whose total the header or the search above gave.
    local need, at0, c, _ = held + n - limits[i], w[4 * i - 1], c0
    if first > 0 then _, c = at(first) end
    if (c - from) % M < need then
` + probeHelper + `
      local lo, hi = first, cnt - 1
      while hi - lo > 1 do
        local mid = math.floor((lo + hi) / 2)
        _, c = at(mid)
        if (c - from) % M >= need then hi = mid else lo = mid end
      end
      at0 = at(hi)
    end
    retry = at0 + windows[i] - now
  end
  out[4 * i - 1], out[4 * i], out[4 * i + 1], out[4 * i + 2] = remaining, retry, reset, refill
end
out[3 + 4 * P], out[4 + 4 * P] = 0, 0
return out
`

var slidingLogScript = redis.NewScript(slidingLogSource)

// The helpers below are spliced into the branches of the script that use
// them, rather than defined once at its top: Lua makes a closure each time
// a definition runs, whether or not it is called, and one that captures
// the log's state costs about what a Redis call does.

// probeHelper makes at(i), the instant of the i-th oldest entry and its
// running total: from the header for the oldest and newest, from the
// buffer, or with a GETRANGE of the ring, at most once a run.
const probeHelper = `
if not at then
  local probed = {}
  at = function(i)
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
        t, c = struct.unpack(ENT, redis.call('GETRANGE', key, HB + 8 * p, HB + 8 * p + 7))
      end
      e = {(TN - (tn - t) % M) * ltick, c}
      probed[i] = e
    end
    return e[1], e[2]
  end
end
`

// rewriteHelpers makes
//
//   - ringBytes(), the ring's entries, oldest first, as stored;
//   - ring(buf), the instants and running totals of the ring's entries and
//     then of the buffer's, buf, oldest first;
//   - write(s, m, b, want, px), which writes the log whole in the tick of
//     the policies deciding now: the m entries s (as stored, oldest first)
//     with running total b before them, in the buffer when they fit, else
//     in a ring with room for at least want entries; expiring in px
//     milliseconds (nil: never). The ring's capacity fills Redis's
//     allocation: the string with its 4 to 10 bytes of sds header and
//     terminator, rounded up to a size class of its allocator (jemalloc's,
//     four per doubling).
const rewriteHelpers = `
local function ringBytes()
  if rc == 0 then return '' end
  local e = head + rc
  local s = redis.call('GETRANGE', key, HB + 8 * head, HB + 8 * math.min(e, cap) - 1)
  if e > cap then s = s .. redis.call('GETRANGE', key, HB, HB + 8 * (e - cap) - 1) end
  return s
end
local function ring(buf)
  local s, ins, cs, pos, t = ringBytes() .. buf, {}, {}, 1
  for i = 1, #s / 8 do
    t, cs[i], pos = struct.unpack(ENT, s, pos)
    ins[i] = (TN - (tn - t) % M) * ltick
  end
  return ins, cs
end
local function write(s, m, b, want, px)
  local rs = ''
  t0, c0 = struct.unpack(ENT, s, 1)
  tn, total = struct.unpack(ENT, s, 8 * m - 7)
  cap, head, rc, base, cnt, lk, ltick = 0, 0, 0, b, m, k, tick
  if m > B then
    local z = HB + 8 * math.max(want, m)
    local o = 4
    if z >= 256 then o = 6 end
    if z >= 65536 then o = 10 end
    local a = 64
    while a < z + o do a = a * 2 end
    local step = math.max(16, a / 8)
    cap = math.floor((math.ceil((z + o) / step) * step - HB - o) / 8)
    rs, s, rc = s .. string.rep('\0', 8 * (cap - m)), '', m
  end
  hdr = struct.pack(HDR, 1, k, gen, cap, 0, rc, b, c0, t0, expires, m, total, tn, last) .. s .. string.rep('\0', 8 * B - #s)
  if px then redis.call('SET', key, hdr .. rs, 'PX', px) else redis.call('SET', key, hdr .. rs) end
  local lt = math.ceil(last / tick)
  TN = lt + (tn - lt + 2147483648) % M - 2147483648
  R0, Rn = (TN - (tn - t0) % M) * tick, TN * tick
end
`
