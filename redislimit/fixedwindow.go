package redislimit

// fixedWindowSource keeps, per key, a hash with two fields per window
// length L (in microseconds): wL, the number of its current window, and nL,
// the count in it. Windows are aligned to multiples of their length since
// the Unix epoch. A count starts over when its window number changes; a
// field l holds the newest instant the key was decided at, which every
// decision of the key writes (HSET) and a clock that steps back is clamped
// to, so it stays in the newest window seen. The key expires
// when the last of its current windows ends (set when one of them starts).
// All of a window's events leave together when it ends, so refillAfter
// equals resetAfter. A field g holds the hash's generation, drawn when an
// admission creates it, which receipts name (see refund.go).
//
// Fields are named by window length, not by the policy's position, so that
// a key whose policies change (SetTier, tiers) never reads one window's
// number as another's: two policies of one length count the same events,
// and a length the key has not been under starts from 0.
const fixedWindowSource = `
local function num(x) return string.format('%.0f', x) end

-- prepare names each policy's fields, after g and l.
local function prepare(tr)
  local fields = {'g', 'l'}
  for i = 1, tr.P do
    fields[1 + 2 * i] = 'w' .. num(tr.windows[i])
    fields[2 + 2 * i] = 'n' .. num(tr.windows[i])
  end
  tr.fields = fields
  return tr
end

local function load(key, n, tr)
  local cur = redis.pcall('HMGET', key, unpack(tr.fields))
  if cur.err then return nil, cur.err end
  local last, now = tonumber(cur[2]), now0
  if last and now < last then now = last end
  return {key = key, n = n, tr = tr, now = now, room = false, cur = cur, gen = tonumber(cur[1]), last = last,
    idx = false, count = false, left = false, fresh = false, ttl = 0}
end

-- assess finds each policy's current window, its count and the time until
-- it ends.
local function assess(r)
  local st, tr, n, now = r, r.tr, r.n, r.now
  local idx, count, left, fresh, ttl = {}, {}, {}, false, 0
  local room = n >= 0 and n <= tr.lmin
  for i = 1, tr.P do
    local w = tr.windows[i]
    local x, c = math.floor(now / w), 0
    local stored = tonumber(st.cur[1 + 2 * i])
    if stored then
      if stored > x then x = stored end
      if stored == x then c = tonumber(st.cur[2 + 2 * i]) or 0 end
    end
    idx[i], count[i], left[i] = x, c, (x + 1) * w - now
    if c == 0 then fresh = true end
    if left[i] > ttl then ttl = left[i] end
    if c + n > tr.limits[i] then room = false end
  end
  if n == 0 then room = true end
  st.idx, st.count, st.left, st.fresh, st.ttl = idx, count, left, fresh, ttl
  r.room = room
end

local function admit(r)
  local st, tr, n, now = r, r.tr, r.n, r.now
  local set = {'l', num(now)}
  if not st.gen then
    st.gen = ` + newGen + `
    set[3], set[4] = 'g', st.gen
  end
  local out = {now}
  for i = 1, tr.P do
    set[#set + 1] = tr.fields[1 + 2 * i]
    set[#set + 1] = num(st.idx[i])
    set[#set + 1] = tr.fields[2 + 2 * i]
    set[#set + 1] = st.count[i] + n
    local left = st.left[i]
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = tr.limits[i] - st.count[i] - n, 0, left, left
  end
  redis.call('HSET', r.key, unpack(set))
  if st.fresh then redis.call('PEXPIRE', r.key, math.ceil(st.ttl / 1000)) end
  out[2 + 4 * tr.P], out[3 + 4 * tr.P] = st.gen, 0
  return struct.pack(tr.fmt, unpack(out))
end

local function describe(r, n)
  local st, tr, now = r, r.tr, r.now
  local out = {now}
  for i = 1, tr.P do
    local c, left, limit = st.count[i], st.left[i], tr.limits[i]
    local remaining, retry, reset = limit - c, 0, 0
    if remaining < 0 then remaining = 0 end
    if c > 0 then reset = left end
    if n > 0 and n <= limit and c + n > limit then retry = left end
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = remaining, retry, reset, reset
  end
  out[2 + 4 * tr.P], out[3 + 4 * tr.P] = 0, 0
  if st.gen and (not st.last or now > st.last) then redis.pcall('HSET', r.key, 'l', num(now)) end
  return struct.pack(tr.fmt, unpack(out))
end
`

var fixedWindowScript = decisionScript(fixedWindowSource)
