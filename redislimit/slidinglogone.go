package redislimit

// slidingLogFast sets fast(key, n, P, lim, win, wmax, lmin, k, tick,
// lead, hdr, after, aj): the key's part of an admitted record (its numbers,
// packed, after the status byte 1 when lead is set) of weight n under P
// sliding policies (limits lim, windows win, as numbers when P is 1, else
// tables; the longest window wmax, the least limit lmin, ticks of tick =
// 2^k µs), or false and the text of the error of a write Redis refused,
// in the common case of an admission, decided from the header unpacked
// into locals, with no tables of the key's state: a weight n > 0 that
// fits, on a key with no log (written whole with one SET) or a log of
// version 1 in the tier's tick whose windows have lost nothing since the
// last decision, appended in place (to the buffer, flushed into the ring
// when full, or merged into the newest entry), or grown: rewritten whole
// with one SET (slidingLogRing's rewrite) when the buffer is full and the
// ring has no room for it. It writes what admit writes in that case, byte
// for byte, and answers as the driver would (TestOneScriptMatchesBatch,
// TestFastGrowthMatchesGeneral). In any other case (an empty log, a
// refusal, a window to prune, a ring to shrink or a log to retick) it
// writes nothing and returns nil, leaving the header it read in pre for
// load. hdr, when given, is
// the key's header as read. With after set, where it would decide it first
// calls after(aj), and writes only when that returns true; else it writes
// nothing and returns true. The batch script takes it for each request of
// one key, and for each key of a request of several (takeAll, whose after
// decides the keys after this one). Each command's constant offsets go as
// strings: Redis formats a number argument with printf, which costs about
// what the command does.
const slidingLogFast = `
fast = function(key, n, P, lim, win, wmax, lmin, k, tick, lead, hdr, after, aj)
  local H, HB, B, M = 56, 88, 4, 4294967296
  if n <= 0 or n > lmin then return nil end
  if not hdr then
    hdr = redis.pcall('GETRANGE', key, '0', '151') -- HB + 63
    pre = hdr
  end
  if type(hdr) ~= 'string' then return nil end
  local now, R, R0, held, gen, ok = now0
  if #hdr < HB then
    -- No key: a new log of a generation of its own, its entry in the
    -- buffer, no ring, as admit writes it.
    if #hdr > 0 then return nil end
    if after and not after(aj) then return true end
    pre = nil
    R, held = now, 0
    if res > 0 then R = math.ceil(R / res) * res end
    R = math.ceil(R / tick) * tick
    local ttl = math.ceil((R - now + wmax * 1.5) / 1000) * 1000
    local t = (R / tick) % M
    gen = ` + newGen + `
    ok = redis.pcall('SET', key, struct.pack('<BBHIIIIIIdIIIdIIxxxxxxxxxxxxxxxxxxxxxxxx', 1, k, gen, 0, 0, 0, 0, n, t, now + ttl, 1, n, t, now, t, n),
      'PX', ttl / 1000)
    if ok.ok then ok = 0 end -- SET's status reply, a table as errors are
  else
    local v, lk, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last
    v, lk, gen, cap, head, rc, base, c0, t0, expires, cnt, total, tn, last = struct.unpack('<BBHIIIIIIdIIId', hdr)
    if v ~= 1 or cnt == 0 or lk ~= k then return nil end
    local lt = math.ceil(last / tick)
    local TN = lt + (tn - lt + 2147483648) % M - 2147483648
    local Rn = TN * tick
    R0 = (TN - (tn - t0) % M) * tick
    if now < last then now = last end
    held = (total - base) % M
    if P == 1 then
      if R0 <= now - win or held + n > lim then return nil end
    else
      for i = 1, P do
        if R0 <= now - win[i] or held + n > lim[i] then return nil end
      end
    end
    local nb = cnt - rc
    R = now
    if res > 0 then R = math.ceil(R / res) * res end
    R = math.ceil(R / tick) * tick
    if R < Rn then R = math.ceil(Rn / tick) * tick end
    local merge = R == Rn
    if cap > 8 and rc <= cap / 4 then return nil end
    if after and not after(aj) then return true end
    pre = nil -- decided here: nothing for load
    local fixed, ttl = false, nil
    if expires < R + wmax then
      ttl = math.ceil((R - now + wmax * 1.5) / 1000) * 1000
      expires, fixed = now + ttl, true
    end
    local m = cnt
    if not merge then m = cnt + 1 end
    local c, tr = (total + n) % M, (R / tick) % M
    if not merge and nb == B and rc + B > cap then
      -- The buffer is full and the ring has no room for it: the log
      -- grows, rewritten whole as admit's write does it, the ring's
      -- entries, the buffer's and the new one all in a ring of room for
      -- twice the entries (at most what the longest window can hold).
      local s = hdr:sub(H + 1, HB) .. struct.pack('<II', tr, c)
      if rc > 0 then
        local e = head + rc
        local rs = redis.call('GETRANGE', key, HB + 8 * head, HB + 8 * math.min(e, cap) - 1)
        if e > cap then rs = rs .. redis.call('GETRANGE', key, HB, HB + 8 * (e - cap) - 1) end
        s = rs .. s
      end
      local limit = lim
      if P > 1 then
        for i = 1, P do
          if win[i] == wmax then limit = lim[i] break end
        end
      end
      cap = ringCap(HB, ringWant(m, cap, limit, wmax))
      ok = rewrite(key, struct.pack('<BBHIIIIIIdIIId', 1, lk, gen, cap, 0, m, base, c0, t0, expires, m, c, tr, now) ..
        string.rep('\0', 8 * B) .. s .. string.rep('\0', 8 * (cap - m)), ttl and ttl / 1000)
      if ok.ok then ok = 0 end
      ttl = nil
    else
      -- buf: the buffer's entries the write keeps before the new entry,
      -- which follows them unless it replaced the newest in the ring.
      local buf, te = '', true
      ok = 0
      if merge and nb == 0 then
        local p = head + rc - 1
        if p >= cap then p = p - cap end
        ok, te = redis.pcall('SETRANGE', key, HB + 8 * p, struct.pack('<II', tr, c)), false
      elseif merge then
        buf = hdr:sub(H + 1, H + 8 * nb - 8)
      elseif nb == B then
        local p = head + rc
        if p >= cap then p = p - cap end
        buf = hdr:sub(H + 1, H + 8 * nb)
        if p + B <= cap then
          ok = redis.pcall('SETRANGE', key, HB + 8 * p, buf)
        else
          ok = redis.pcall('SETRANGE', key, HB + 8 * p, buf:sub(1, 8 * (cap - p)))
          if type(ok) ~= 'table' then ok = redis.pcall('SETRANGE', key, HB, buf:sub(8 * (cap - p) + 1)) end
        end
        rc, buf, fixed = rc + B, '', true
      elseif nb > 0 then
        buf = hdr:sub(H + 1, H + 8 * nb)
      end
      if m == 1 then c0, t0, fixed = c, tr, true end
      -- Offsets go as strings: Redis formats a number argument with printf.
      if type(ok) ~= 'table' then
        if fixed and te then
          ok = redis.pcall('SETRANGE', key, '0', struct.pack('<BBHIIIIIIdIIIdc0II', 1, lk, gen, cap, head, rc, base, c0, t0, expires, m, c, tr, now, buf, tr, c))
        elseif fixed then
          ok = redis.pcall('SETRANGE', key, '0', struct.pack('<BBHIIIIIIdIIId', 1, lk, gen, cap, head, rc, base, c0, t0, expires, m, c, tr, now))
        elseif te then
          ok = redis.pcall('SETRANGE', key, '36', struct.pack('<IIIdc0II', m, c, tr, now, buf, tr, c))
        else
          ok = redis.pcall('SETRANGE', key, '36', struct.pack('<IIId', m, c, tr, now))
        end
      end
    end
    if ttl and type(ok) ~= 'table' then ok = redis.pcall('PEXPIRE', key, ttl / 1000) end
  end
  if type(ok) == 'table' then return false, tostring(ok.err) end
  if P == 1 then
    local refill = R + win - now
    if held > 0 then refill = R0 + win - now end
    if lead then return struct.pack('<Bi8i8i8i8i8i8i8', 1, now, lim - held - n, 0, R + win - now, refill, gen, R - now) end
    return struct.pack('<i8i8i8i8i8i8i8', now, lim - held - n, 0, R + win - now, refill, gen, R - now)
  end
  local out = {now}
  for i = 1, P do
    local w = win[i]
    local refill = R + w - now
    if held > 0 then refill = R0 + w - now end
    out[4 * i - 2], out[4 * i - 1], out[4 * i], out[4 * i + 1] = lim[i] - held - n, 0, R + w - now, refill
  end
  out[2 + 4 * P], out[3 + 4 * P] = gen, R - now
  local s = struct.pack('<' .. string.rep('i8', 3 + 4 * P), unpack(out))
  if lead then return '\1' .. s end
  return s
end
`

// slidingLogOneSource is the sliding log's script for a run of one
// request (a lone caller's): the batch script's protocol, reply and log
// layout (scripts.go, slidinglog.go), with fast (above) in front for the
// common case, a request of one key at a weight n > 0 under sliding
// policies alone, its shape checked by ARGV's strings and one policy's
// limit and window read as numbers, with no tables of tiers and no key's
// table (TestOneScriptMatchesBatch). Any other case (an empty log, a
// refusal, a window to prune, a rewrite, a calendar, a lease, several
// keys) runs the batch script's code, which follows in the same chunk, on
// the header fast read: a decision fast takes returns before the code
// that makes the general closures runs.
const slidingLogOneSource = driverNow + slidingLogRing + slidingLogFast + `
do
  -- The shape, by its strings as the client writes them: anything else
  -- takes the general code below.
  local P, go = 1, ARGV[3] == '1'
  if go and ARGV[4] ~= '1' then P = tonumber(ARGV[4]) end
  go = go and ARGV[5 + 2 * P] == '1'
  local lim, win, wmax, lmin
  if go and P == 1 then
    -- x + 0 converts x as tonumber does, without the call.
    lim, win = ARGV[5] + 0, ARGV[6] + 0
    wmax, lmin, go = win, lim, win > 0
  elseif go then
    lim, win, wmax, lmin = {}, {}, 0, math.huge
    for i = 1, P do
      local l, w = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
      if w == 0 then go = false break end
      lim[i], win[i] = l, w
      if w > wmax then wmax = w end
      if l < lmin then lmin = l end
    end
  end
  if go then
    local k, tick = 0, 1
    while wmax >= 2147483647 * tick do k, tick = k + 1, tick * 2 end
    local n = ARGV[6 + 2 * P]
    if n == '1' then n = 1 else n = n + 0 end
    local s, err = fast(KEYS[1], n, P, lim, win, wmax, lmin, k, tick, true)
    if s then return s end
    if s == false then return struct.pack('<BHH', 2, 1, #err) .. err end
    fast = nil -- the driver's request is this one, which fast declined
  end
end
` + slidingLogSource + driverTiers + driverTail

// slidingLogOneScript decides a run of one request under the sliding log
// (batch.go picks it).
var slidingLogOneScript = newScript(slidingLogOneSource)
