package redislimit

// slidingLogSource keeps, per key, one Redis string: a 56-byte header, a
// buffer of the newest entries (up to B, 4), then a ring of cap entries.
// An entry stands for the events admitted at one instant:
//
//	tick   uint32  the instant in ticks, mod 2^32
//	total  uint32  the running total of weight admitted, up to and
//	               including this entry's, mod 2^32
//
// The header holds, little-endian (Redis's Lua struct library packs and
// unpacks it): version uint8 (1, or 2 for a log with calendar counters
// between its buffer and its ring, see calendarLua), k uint8 (ticks are 2^k µs), gen uint16
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
// its next admission. Every decision prunes what has left the longest
// window of the policies deciding now: the head moves past it in O(1), and
// once the newest entry has left, the whole log goes at once (the key
// stays, with no entries, its last and its expiry). A server clock that
// steps back is clamped to last, so no decision looks further back than
// one has pruned.
//
// An append puts its entry in the buffer, or adds its weight to the newest
// entry when both round to one instant, and writes the fields it changed
// with the buffer: one SETRANGE, as they are contiguous. When the buffer is
// full, its entries move to the ring's tail first (one SETRANGE more, once
// per B appends). A new key is a header and a buffer, 88 bytes, with no
// ring (152 with calendar counters). When the ring has no room for the buffer, it grows to about twice
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
// nothing writes the instant it decided at, last, and prunes what has left
// the longest window of the policies deciding now, in one write of the
// header (of the header and buffer when the buffer lost entries), as the
// in-process log settles at every decision; and when the key would expire
// before its newest entry leaves that longest window (after a SetTier, or
// a key moving to a tier with a longer window), it sets the expiry an
// admission would have.
//
// The running totals are mod 2^32: after an admission the log holds at
// most the longest policy's limit, below 2^31, and a refusal adds nothing,
// so differences of totals are never ambiguous.
//
// A decision reads the header and buffer once (one GETRANGE) and writes
// once (one SETRANGE, or a SET for a new or rewritten log; one more when
// the buffer moves into the ring, once per B admissions, and a PEXPIRE
// once per half window); only a window that lost entries since the last
// decision probes the ring.
const slidingLogSource = `
local B, H, M, CS, CM = 4, 56, 4294967296, 64, 60000000
local HB = H + 8 * B
local HDR, HOT, ENT, SLOT = '<BBHIIIIIIdIIId', '<IIId', '<II', '<IId'
` + calendarLua + `

-- prepare gives a tier its tick: 2^k µs, the least in which its longest
-- window is under 2^31-1 ticks; and fl, fw, its limits and windows as the
-- fast path takes them (one policy's as numbers, several as tables).
local function prepare(tr)
  local k, tick = 0, 1
  while tr.wmax >= 2147483647 * tick do k, tick = k + 1, tick * 2 end
  tr.k, tr.tick = k, tick
  if tr.P == 1 then
    tr.fl, tr.fw = tr.limits[1], tr.windows[1]
  else
    tr.fl, tr.fw = tr.limits, tr.windows
  end
  return tr
end

-- load reads the header and buffer (or takes what the lone script's fast
-- path read of the run's first key, pre). In the state: ltick, the log's tick;
-- TN, the newest entry's tick, whole; R0 and Rn, the oldest and newest
-- entries' instants: an entry's instant is its tick's distance back from
-- TN, in ticks.
local function load(key, n, tr)
  local hdr = pre
  if hdr then pre = nil else hdr = redis.pcall('GETRANGE', key, '0', '151') end -- to HB + CS - 1, as strings (see slidingLogFast)
  if type(hdr) ~= 'string' then return nil, tostring(hdr.err) end
  if #hdr >= HB then
    local v, lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last = struct.unpack(HDR, hdr)
    if v ~= 1 and v ~= 2 then return nil, 'unknown keyrate log version ' .. v end
    if v == 2 and #hdr < HB + CS then return nil, 'not a keyrate log' end
    local ltick, TN, R0, Rn = 2 ^ lk, 0, 0, 0
    if cnt > 0 then
      local lt = math.ceil(last / ltick)
      TN = lt + (tn - lt + 2147483648) % M - 2147483648
      R0, Rn = (TN - (tn - t0) % M) * ltick, TN * ltick
    end
    local now = now0
    if now < last then now = last end
    local ends, err = periodEnds(tr, now)
    if not ends then return nil, err end
    local rb, slots, sect = HB, {}, ''
    if v == 2 then rb, slots, sect = HB + CS, slotsOf(hdr), hdr:sub(HB + 1, HB + CS) end
    return {key = key, n = n, tr = tr, now = now, w = false, room = false, probed = false,
      hdr = hdr, exists = true, lk = lk, gen = gen, cap = cap, head = head, rc = rc, base = base,
      c0 = c0, t0 = t0, expires = expires, cnt = cnt, total = total, tn = tn, last = last, ltick = ltick,
      TN = TN, R0 = R0, Rn = Rn, v = v, rb = rb, slots = slots, sect = sect, ends = ends}
  elseif #hdr > 0 then
    return nil, 'not a keyrate log'
  end
  local ends, err = periodEnds(tr, now0)
  if not ends then return nil, err end
  return {key = key, n = n, tr = tr, now = now0, w = false, room = false, probed = false,
    hdr = hdr, exists = false, lk = 0, gen = 0, cap = 0, head = 0, rc = 0, base = 0, c0 = 0,
    t0 = 0, expires = 0, cnt = 0, total = 0, tn = 0, last = 0, ltick = 1, TN = 0, R0 = 0, Rn = 0,
    v = 1, rb = HB, slots = {}, sect = '', ends = ends}
end

-- at returns the instant of the i-th oldest entry and its running total:
-- from the header for the oldest and newest, from the buffer, or with a
-- GETRANGE of the ring, at most once a run.
local function at(st, i)
  if i == 0 then return st.R0, st.c0 end
  if i == st.cnt - 1 then return st.Rn, st.total end
  local probed = st.probed
  if not probed then
    probed = {}
    st.probed = probed
  end
  local e = probed[i]
  if not e then
    local t, c
    if i >= st.rc then
      t, c = struct.unpack(ENT, st.hdr, H + 8 * (i - st.rc) + 1)
    else
      local p = st.head + i
      if p >= st.cap then p = p - st.cap end
      t, c = struct.unpack(ENT, redis.call('GETRANGE', st.key, st.rb + 8 * p, st.rb + 8 * p + 7))
    end
    e = {(st.TN - (st.tn - t) % M) * st.ltick, c}
    probed[i] = e
  end
  return e[1], e[2]
end

-- assess leaves, for each policy i, in r.w[4i-3] to r.w[4i]: the weight
-- its window holds, the index of the oldest entry in it (nil when none
-- is), that entry's instant, and the running total before it. The oldest
-- entry of the log answers for every window it is in; the others search,
-- trying the entry after the oldest first: usually the next to leave.
local function assess(r)
  local st, tr, n, now = r, r.tr, r.n, r.now
  local w, cnt = {}, st.cnt
  local room = n >= 0 and n <= tr.lmin
  for i = 1, tr.P do
    local h = now - tr.windows[i]
    w[4 * i - 3] = 0
    local cal = tr.cals and tr.cals[i]
    if cal then
      -- A calendar policy: its counter in the period holding now, whose
      -- end stands where a window's oldest entry would.
      w[4 * i - 3], w[4 * i - 1], w[4 * i] = counted(st, cal[1], st.ends[i]), st.ends[i], 0
    elseif cnt > 0 and st.Rn > h then
      if st.R0 > h then
        w[4 * i - 2], w[4 * i - 1], w[4 * i] = 0, st.R0, st.base
      else
        local lo, hi, mid = 0, cnt - 1, 1
        while hi - lo > 1 do
          if at(st, mid) > h then hi = mid else lo = mid end
          mid = math.floor((lo + hi) / 2)
        end
        w[4 * i - 2], w[4 * i - 1] = hi, at(st, hi)
        local _, c = at(st, lo)
        w[4 * i] = c
      end
      w[4 * i - 3] = (st.total - w[4 * i]) % M
    end
    if w[4 * i - 3] + n > tr.limits[i] then room = false end
  end
  if n == 0 then room = true end
  r.w, r.room = w, room
end

-- prune moves the log's state past what has left the longest window of
-- r's policies, as found by assess: from the ring's head, then from the
-- buffer's (the entries it returns skip), or all of it at once. It
-- returns the buffer's entries left, as stored, and whether the header's
-- oldest-entry fields changed.
local function prune(r)
  local st, tr = r, r.tr
  local j, fixed, skip = r.w[4 * tr.longest - 2], false, 0
  if st.cnt == 0 then return '', false end
  if not j then
    st.cnt, st.rc, st.head, fixed = 0, 0, 0, true
  elseif j > 0 then
    local t, c = at(st, j)
    if j <= st.rc then
      st.head, st.rc = st.head + j, st.rc - j
      if st.head >= st.cap then st.head = st.head - st.cap end
    else
      skip, st.head, st.rc = j - st.rc, 0, 0
    end
    st.cnt, st.base, st.R0, st.c0, st.t0, fixed = st.cnt - j, r.w[4 * tr.longest], t, c, (t / st.ltick) % M, true
  end
  if st.cnt == 0 then st.base, st.total, st.c0, st.t0, st.tn = 0, 0, 0, 0, 0 end
  local nb = st.cnt - st.rc
  return st.hdr:sub(H + 8 * skip + 1, H + 8 * (skip + nb)), fixed
end

-- admit records r.n at r.now: one entry at the instant rounded up (to the
-- resolution, then the tick), never before the newest entry (which a
-- client with a coarser resolution may have put later), merged into the
-- newest when both round to one instant; and r.n more on the counter of
-- each calendar policy, in the period holding now. A tier of calendar
-- policies alone records no entry.
local function admit(r)
  local st, tr, n, now, w = r, r.tr, r.n, r.now, r.w
  local key, k, tick, wmax = r.key, tr.k, tr.tick, tr.wmax
  local buf, fixed = prune(r)
  local cnt, rc, nb = st.cnt, st.rc, st.cnt - st.rc
  -- A new generation only for a log that holds nothing a receipt names.
  local fresh = cnt == 0 and not held(st, now)
  local sect = st.sect
  if tr.cals then sect, fixed = section(st, tr, w, n, now), true end
  local cend = calEnd(st)
  local R = now
  if wmax == 0 then
    -- Calendar policies alone: the counters, with no entry and no ring.
    if fresh then st.gen = ` + newGen + ` end
    st.last = now
    local ttl
    if st.expires < cend then
      ttl = math.ceil((cend - now) / 1000) * 1000
      st.expires = now + ttl
    end
    local s = struct.pack(HDR, 2, k, st.gen, 0, 0, 0, 0, 0, 0, st.expires, 0, 0, 0, now) .. string.rep('\0', 8 * B) .. sect
    if st.exists and st.v == 2 and st.cap == 0 then
      redis.call('SETRANGE', key, 0, s)
      if ttl then redis.call('PEXPIRE', key, ttl / 1000) end
    else
      local ok = rewrite(key, s, ttl and ttl / 1000)
      if ok.err then error(ok) end
    end
    st.v = 2
  else
  if res > 0 then R = math.ceil(R / res) * res end
  R = math.ceil(R / tick) * tick
  if cnt > 0 and R < st.Rn then R = math.ceil(st.Rn / tick) * tick end
  st.last = now
  local ttl
  if st.expires < R + wmax or st.expires < cend or cnt == 0 then
    ttl = math.ceil(math.max(R - now + wmax * 1.5, cend - now) / 1000) * 1000
    st.expires, fixed = now + ttl, true
  end
  local merge = cnt > 0 and st.lk == k and R == st.Rn
  local m = cnt
  if not merge then m = cnt + 1 end
  local c = (st.total + n) % M
  local e = struct.pack(ENT, (R / tick) % M, c)
  if cnt == 0 then
    -- A new log, of a generation of its own unless a calendar counter
    -- holds a receipt's events: the entry in the buffer, no ring.
    if fresh then st.gen = ` + newGen + ` end
    if tr.cals then st.v = 2 end
    local s = struct.pack(HDR, st.v, k, st.gen, 0, 0, 0, 0, c, (R / tick) % M, st.expires, 1, c, (R / tick) % M, now) ..
      e .. string.rep('\0', 8 * (B - 1))
    if st.v == 2 then s = s .. sect end
    redis.call('SET', key, s, 'PX', ttl / 1000)
  elseif st.lk ~= k or (tr.cals and st.v == 1) or (not merge and nb == B and rc + B > st.cap) or (st.cap > 8 and rc <= st.cap / 4) then
    -- Rewrite the log whole, in the tick of the policies deciding now,
    -- with room for twice the entries (at most what the longest window
    -- can hold), or half when a quarter full; a log of version 1 moves
    -- to 2 when calendar policies first decide it.
` + rewriteHelpers + `
    local px = ttl and ttl / 1000
    local s
    if st.lk ~= k then
      -- Instants round up to the new tick; entries that meet merge.
      local parts, r0 = retick(st, tr, buf)
      if R == r0 then parts[#parts] = nil end
      parts[#parts + 1] = e
      s, m = table.concat(parts), #parts
    else
      s = ringBytes(st) .. buf
      if merge then s = s:sub(1, -9) end
      s = s .. e
    end
    local want = ringWant(m, st.cap, tr.limits[tr.longest], wmax)
    if tr.cals then st.v = 2 end
    st.sect = sect
    write(st, tr, s, m, want, px)
  else
    -- In place: the entry joins the buffer (flushed into the ring when
    -- full) or, when the newest entry is in the ring, replaces it there;
    -- then the header's fields that changed and the buffer (and the
    -- calendar counters), in one write.
    local tail = buf .. e
    local cap, head = st.cap, st.head
    if merge and nb == 0 then
      local p = head + rc - 1
      if p >= cap then p = p - cap end
      redis.call('SETRANGE', key, st.rb + 8 * p, e)
      tail = ''
    elseif merge then
      tail = buf:sub(1, -9) .. e
    elseif nb == B then
      local p = head + rc
      if p >= cap then p = p - cap end
      if p + B <= cap then
        redis.call('SETRANGE', key, st.rb + 8 * p, buf)
      else
        redis.call('SETRANGE', key, st.rb + 8 * p, buf:sub(1, 8 * (cap - p)))
        redis.call('SETRANGE', key, st.rb, buf:sub(8 * (cap - p) + 1))
      end
      rc, tail, fixed = rc + B, e, true
    end
    local tn = (R / tick) % M
    if m == 1 then st.c0, st.t0, fixed = c, tn, true end
    if tr.cals then tail = tail .. string.rep('\0', 8 * B - #tail) .. sect end
    if fixed then
      redis.call('SETRANGE', key, '0', struct.pack(HDR, st.v, st.lk, st.gen, cap, head, rc, st.base, st.c0, st.t0, st.expires, m, c, tn, now) .. tail)
    else
      redis.call('SETRANGE', key, '36', struct.pack(HOT, m, c, tn, now) .. tail)
    end
    if ttl then redis.call('PEXPIRE', key, ttl / 1000) end
  end
  end
  local out = {now}
  for i = 1, tr.P do
    local win = tr.windows[i]
    if tr.cals and tr.cals[i] then
      local left = w[4 * i - 1] - now
      out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = tr.limits[i] - w[4 * i - 3] - n, 0, left, left
    else
      local refill = R + win - now
      if w[4 * i - 3] > 0 then refill = w[4 * i - 1] + win - now end
      out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = tr.limits[i] - w[4 * i - 3] - n, 0, R + win - now, refill
    end
  end
  out[2 + 4 * tr.P], out[3 + 4 * tr.P] = st.gen, R - now
  return struct.pack(tr.fmt, unpack(out))
end

-- leasable returns the weight a lease of r takes (lease.go): m, what the
-- replica asks for, but no more than half the room any policy has left,
-- so that a replica leaves the others at least as much as it takes; and
-- at least r.n, which assess found room for.
leasable = function(r, m)
  local tr, w, g = r.tr, r.w, m
  for i = 1, tr.P do
    local half = math.floor((tr.limits[i] - w[4 * i - 3]) / 2)
    if half < g then g = half end
  end
  if g < r.n then g = r.n end
  return g
end

-- describe gives r's numbers at weight n, recording nothing, then settles
-- the log at r.now: what left the longest window goes, and last moves on.
local function describe(r, n)
  local st, tr, now, w = r, r.tr, r.now, r.w
  local cnt = st.cnt
  local out = {now}
  for i = 1, tr.P do
    local win, limit = tr.windows[i], tr.limits[i]
    local held, first, from = w[4 * i - 3], w[4 * i - 2], w[4 * i]
    local remaining, retry, reset, refill = limit - held, 0, 0, 0
    if remaining < 0 then remaining = 0 end
    if tr.cals and tr.cals[i] then
      -- A calendar policy: its count leaves when the period turns, and a
      -- request that does not fit fits then.
      local left = w[4 * i - 1] - now
      if held > 0 then reset, refill = left, left end
      if n > 0 and n <= limit and held + n > limit then retry = left end
    elseif held > 0 then
      reset = st.Rn + win - now
      refill = w[4 * i - 1] + win - now
    end
    if not (tr.cals and tr.cals[i]) and n > 0 and n <= limit and held + n > limit then
      -- The request fits once the entries up to the first whose running
      -- total since the window's start reaches need have left: usually the
      -- window's oldest, whose total the header or the search gave.
      local need, at0, c, _ = held + n - limit, w[4 * i - 1], st.c0
      if first > 0 then _, c = at(st, first) end
      if (c - from) % M < need then
        local lo, hi = first, cnt - 1
        while hi - lo > 1 do
          local mid = math.floor((lo + hi) / 2)
          _, c = at(st, mid)
          if (c - from) % M >= need then hi = mid else lo = mid end
        end
        at0 = at(st, hi)
      end
      retry = at0 + win - now
    end
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = remaining, retry, reset, refill
  end
  out[2 + 4 * tr.P], out[3 + 4 * tr.P] = 0, 0
  local packed = struct.pack(tr.fmt, unpack(out))
  if not st.exists then return packed end
  local wmax, Rn = tr.wmax, st.Rn
  local ttl
  if cnt > 0 and Rn > now - wmax and st.expires < Rn + wmax then
    -- The key would expire before its newest entry leaves the longest
    -- window, as after a tier with a longer window replaced the one that
    -- last admitted: keep it as an admission would.
    ttl = math.ceil((math.max(Rn, now) - now + wmax * 1.5) / 1000) * 1000
    st.expires = now + ttl
  end
  -- Best effort: Redis may refuse the writes (out of memory), which
  -- leaves the log as it was, unsettled, and the decision stands.
  local buf, fixed = prune(r)
  if st.cnt > 0 and st.lk < tr.k then
    -- The tier's ticks are coarser than the log's: moving last on by up
    -- to its longest window could take it more than 2^31 of the log's
    -- ticks past the newest entry, whose instant is recovered from last.
    -- Rewrite the log in the tier's ticks first, as an admission would.
` + rewriteHelpers + `
    local parts = retick(st, tr, buf)
    local px = ttl and ttl / 1000
    st.last = now
    pcall(write, st, tr, table.concat(parts), #parts, #parts, px)
  elseif fixed or ttl then
    local ok = redis.pcall('SETRANGE', r.key, '0', struct.pack(HDR, st.v, st.lk, st.gen, st.cap, st.head, st.rc, st.base, st.c0, st.t0,
      st.expires, st.cnt, st.total, st.tn, now) .. buf .. string.rep('\0', 8 * B - #buf))
    if ttl and type(ok) ~= 'table' then redis.pcall('PEXPIRE', r.key, ttl / 1000) end
  elseif now > st.last then
    redis.pcall('SETRANGE', r.key, '48', struct.pack('<d', now))
  end
  return packed
end
`

var slidingLogScript = slidingLogBatch()

// calendarLua defines what the sliding log needs of calendar policies
// (calendar.go): a log of version 2 keeps, between its buffer and its
// ring, CS = 64 bytes of counters, four slots of
//
//	id     uint32   the calendar's id; 0: an empty slot
//	count  uint32   the weight admitted in the period
//	end    float64  the end of that period, µs since the Unix epoch
//
// A policy's count is its calendar's slot's when that slot's end is the
// end of the period holding now, else 0: a period that turned counts from
// 0 with no write. An admission writes the slots of the tier's calendars
// first, then keeps the others' whose periods have not ended, while there
// is room. The key lives until CM (a minute) after the end of the latest
// period a slot counts events in, so that a server clock stepping back a
// little still finds the count.
const calendarLua = `
-- slotsOf reads the calendar counters of a log of version 2.
local function slotsOf(hdr)
  local slots = {}
  for i = 0, 3 do
    local id, c, e = struct.unpack(SLOT, hdr, HB + 16 * i + 1)
    if id ~= 0 then slots[#slots + 1] = {id, c, e} end
  end
  return slots
end

-- periodEnds returns, for each calendar policy of tr (by its index), the
-- end of its period that holds now, from the boundaries the client sent
-- (its previous period's start, its current one's start and end, its
-- next one's end), or nil and why.
local function periodEnds(tr, now)
  local ends = {}
  if not tr.cals then return ends end
  for j, c in pairs(tr.cals) do
    local e
    if now >= c[2] then
      if now < c[3] then e = c[3] elseif now < c[4] then e = c[4] elseif now < c[5] then e = c[5] end
    end
    if not e then return nil, 'the server clock is outside the calendar periods the client sent: the two clocks differ by more than a period' end
    ends[j] = e
  end
  return ends
end

-- counted returns what calendar id has admitted in the period ending at e.
local function counted(st, id, e)
  for _, s in ipairs(st.slots) do
    if s[1] == id and s[3] == e then return s[2] end
  end
  return 0
end

-- held reports whether a slot counts events in a period not yet ended.
local function held(st, now)
  for _, s in ipairs(st.slots) do
    if s[2] > 0 and s[3] > now then return true end
  end
  return false
end

-- calEnd returns CM past the latest end of a period a slot counts events
-- in, or 0.
local function calEnd(st)
  local e = 0
  for _, s in ipairs(st.slots) do
    if s[2] > 0 and s[3] + CM > e then e = s[3] + CM end
  end
  return e
end

-- section sets the slots after an admission of n under tr, whose policies
-- assess described in w, and returns them packed.
local function section(st, tr, w, n, now)
  local out, seen = {}, {}
  for i = 1, tr.P do
    local c = tr.cals[i]
    if c and not seen[c[1]] then
      seen[c[1]] = true
      out[#out + 1] = {c[1], w[4 * i - 3] + n, w[4 * i - 1]}
    end
  end
  for _, s in ipairs(st.slots) do
    if #out < 4 and not seen[s[1]] and s[3] > now then
      seen[s[1]] = true
      out[#out + 1] = s
    end
  end
  st.slots = out
  local parts = {}
  for i = 1, 4 do
    local s = out[i]
    if s then parts[i] = struct.pack(SLOT, s[1], s[2], s[3]) else parts[i] = string.rep('\0', 16) end
  end
  return table.concat(parts)
end
`

// rewriteHelpers makes, in the branches that rewrite a log (which are
// rare: Lua makes a closure each time a definition runs, whether or not it
// is called),
//
//   - ringBytes(st), the ring's entries, oldest first, as stored;
//   - ring(st, buf), the instants and running totals of the ring's
//     entries and then of the buffer's, buf, oldest first;
//   - retick(st, tr, buf), those entries as stored in the tick of tr,
//     each instant rounded up, those that meet merged, and the newest
//     instant;
//   - write(st, tr, s, m, want, px), which writes the log whole in the
//     tick of tr and version st.v (with st.sect, the calendar counters,
//     in a log of version 2): the m entries s (as stored, oldest first)
//     with running total st.base before them, in the buffer when they
//     fit, else in a ring with room for at least want entries (ringCap's,
//     see slidingLogRing); expiring in px milliseconds, or with px nil,
//     when it expired before (rewrite's).
const rewriteHelpers = `
local function ringBytes(st)
  if st.rc == 0 then return '' end
  local e = st.head + st.rc
  local s = redis.call('GETRANGE', st.key, st.rb + 8 * st.head, st.rb + 8 * math.min(e, st.cap) - 1)
  if e > st.cap then s = s .. redis.call('GETRANGE', st.key, st.rb, st.rb + 8 * (e - st.cap) - 1) end
  return s
end
local function ring(st, buf)
  local s, ins, cs, pos, t = ringBytes(st) .. buf, {}, {}, 1
  for i = 1, #s / 8 do
    t, cs[i], pos = struct.unpack(ENT, s, pos)
    ins[i] = (st.TN - (st.tn - t) % M) * st.ltick
  end
  return ins, cs
end
local function retick(st, tr, buf)
  local tick = tr.tick
  local ins, cs = ring(st, buf)
  local parts, r0 = {}
  for i = 1, #ins do
    local t = math.ceil(ins[i] / tick) * tick
    if t == r0 then parts[#parts] = nil end
    parts[#parts + 1], r0 = struct.pack(ENT, (t / tick) % M, cs[i]), t
  end
  return parts, r0
end
local function write(st, tr, s, m, want, px)
  local rs, cap, rc, rb = '', 0, 0, HB
  if st.v == 2 then rb = HB + CS end
  local t0, c0 = struct.unpack(ENT, s, 1)
  local tn, total = struct.unpack(ENT, s, 8 * m - 7)
  if m > B then
    cap = ringCap(rb, math.max(want, m))
    rs, s, rc = s .. string.rep('\0', 8 * (cap - m)), '', m
  end
  local hdr = struct.pack(HDR, st.v, tr.k, st.gen, cap, 0, rc, st.base, c0, t0, st.expires, m, total, tn, st.last) .. s .. string.rep('\0', 8 * B - #s)
  if st.v == 2 then hdr = hdr .. st.sect end
  local ok = rewrite(st.key, hdr .. rs, px)
  if ok.err then error(ok) end
end
`

// slidingLogRing defines what both the sliding log's general code and its
// fast path (slidinglogone.go) need to rewrite a log whole, so that the
// two write alike:
//
//   - ringWant(m, cap, limit, wmax), the entries a rewrite of m entries
//     out of a ring of cap makes room for: twice those it held, or the
//     entries and a buffer's more, but no more than the longest window
//     (wmax, whose policy's limit is limit) can hold at the resolution;
//     twice the entries when those fill a quarter of it or less;
//   - ringCap(rb, want), the capacity of a ring that starts at byte rb of
//     the string and holds at least want entries, filling Redis's
//     allocation: the string with its 4 to 10 bytes of sds header and
//     terminator, rounded up to a size class of its allocator (jemalloc's,
//     four per doubling);
//   - rewrite(key, s, px), which sets key to s, expiring in px
//     milliseconds, or, with px nil, when it expired before (never, when
//     it did not): with SET's KEEPTTL on servers that have it (6.0; Lua
//     tells the version from 7.0 on), else after a PTTL. It returns SET's
//     reply, a table, as redis.pcall does.
const slidingLogRing = `
local function ringWant(m, cap, limit, wmax)
  local bound = limit
  if res > 0 then bound = math.min(bound, math.floor(wmax / res) + 2) end
  local want = math.max(m, math.min(math.max(m + 4, 2 * cap), bound)) -- 4: the buffer's entries
  if want > 8 and m <= want / 4 then want = 2 * m end
  return want
end
local function ringCap(rb, want)
  local z = rb + 8 * want
  local o = 4
  if z >= 256 then o = 6 end
  if z >= 65536 then o = 10 end
  local a = 64
  while a < z + o do a = a * 2 end
  local step = math.max(16, a / 8)
  return math.floor((math.ceil((z + o) / step) * step - rb - o) / 8)
end
local function rewrite(key, s, px)
  if px then return redis.pcall('SET', key, s, 'PX', px) end
  if (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x060000 then return redis.pcall('SET', key, s, 'KEEPTTL') end
  px = redis.pcall('PTTL', key)
  if type(px) == 'number' and px >= 0 then return redis.pcall('SET', key, s, 'PX', px) end
  return redis.pcall('SET', key, s)
end
`
