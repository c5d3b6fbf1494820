// keyrate live page: draws the decisions the server streams, and replays the
// same requests through a fixed window to show what that design admits.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  const MAX_MARKS = 5000;   // per route and key; older marks are dropped from the drawing
  const MAX_RECEIPTS = 1024; // per route and key: the latest admitted decisions a refund can find
  const FEED_ROWS = 12;
  const DRAW_EVERY_MS = 100;

  const state = {
    keyHeader: 'X-API-Key',
    shownKeys: new Map(),   // API key typed -> promise of the key its decisions come with
    ownKey: '',             // the key the decisions for the API key typed come with, once known
    routes: [],
    byName: new Map(),
    offset: 0,              // server clock minus this browser's clock, in ms
    streams: new Map(),     // "route\u0000key" -> stream
    keysByRoute: new Map(), // route -> Set of keys, for the "Key shown" list
    keysVersion: 0,
    drawnKeysVersion: -1,
    route: null,            // route name shown and requested
    watch: '',              // key shown
    feed: [],
    feedDirty: true,
    dirty: true,
    busy: false,
    connectedAt: null,      // server time the live stream first opened
    droppedAt: -Infinity,   // server time of the latest dropped notice
    dropped: 0,
  };

  const serverNow = () => Date.now() + state.offset;

  // seenServerTime corrects the clock offset, which start() estimates to
  // within half a round trip: the server's clock has reached any instant it
  // reported, so a page that reads an earlier now would draw the newest
  // requests in the future and leave them out of the window it counts.
  function seenServerTime(t) {
    const behind = t - serverNow();
    if (behind > 0) state.offset += behind;
  }

  // ---------- formatting ----------

  const pad = (n, w) => String(n).padStart(w, '0');
  function clock(t, withMs) {
    const d = new Date(t);
    const s = pad(d.getHours(), 2) + ':' + pad(d.getMinutes(), 2) + ':' + pad(d.getSeconds(), 2);
    return withMs ? s + '.' + pad(d.getMilliseconds(), 3) : s;
  }
  function span(ms) {
    if (ms >= 86400000 && ms % 3600000 === 0) return +(ms / 86400000).toFixed(ms % 86400000 === 0 ? 0 : 2) + ' d';
    if (ms >= 60000 && ms % 60000 === 0) return (ms / 60000) + ' min';
    if (ms >= 1000) return +(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 1) + ' s';
    return Math.round(ms) + ' ms';
  }
  const ceilSeconds = (ms) => Math.max(1, Math.ceil(ms / 1000));
  // A route that weighs its requests (a unit such as tokens) counts in
  // thousands: its numbers are grouped, 10,000; a route of requests shows
  // them as they are.
  const weighted = (r) => !!(r && r.unit);
  const grouped = (n) => n.toLocaleString('en-US');
  const fmtOf = (r) => (weighted(r) ? grouped : String);
  const inUnit = (r, n) => (weighted(r) ? grouped(n) + ' ' + r.unit : String(n));
  // weightOf is what a decision's request asked for: 1 from a server that
  // does not say.
  const weightOf = (ev) => (typeof ev.weight === 'number' ? ev.weight : 1);
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
  }
  function setText(id, text) {
    const el = $(id);
    if (el && el.textContent !== text) el.textContent = text;
  }

  // ---------- model ----------

  function streamFor(route, key) {
    const id = route + '\u0000' + key;
    let s = state.streams.get(id);
    if (!s) {
      s = {
        route, key, marks: [],
        policies: null,                // the key's policies, as its last decision reported them
        admitted: 0, refused: 0, refunded: 0, fAdmitted: 0, fRefused: 0,
        // On a route that weighs its requests: the weight admitted
        // requests reserved, and of it what they gave back; the requests
        // that gave back part of theirs and still count; the last settle.
        reserved: 0, given: 0, settled: 0, lastSettle: null,
        // receipt -> the marks of the latest admitted decisions that had
        // it, drawn or not (a page opened late replays decisions too old
        // to draw), so that their refunds still count.
        receipts: new Map(),
        fCounts: new Map(),            // fixed-window index -> requests it admitted
        fMost: null,                   // largest set the fixed window admitted within one window length
        // Per policy, in the order of s.policies:
        sMost: [],                     // largest admitted set within its window length
        refusedBy: [],                 // requests it refused
        knownFrom: [],                 // from when the page has seen every event of its window
        last: null,
        lastParts: null,               // every policy's part of the last decision
        // On a route of several budgets (a model API's requests, tokens
        // and requests in flight): each as the key's last event left it,
        // by name, with the instant of that event.
        budgets: new Map(),
      };
      state.streams.set(id, s);
      let keys = state.keysByRoute.get(route);
      if (!keys) state.keysByRoute.set(route, keys = new Set());
      keys.add(key);
      state.keysVersion++;
    }
    return s;
  }

  // The most weight held within any half-open interval [t, t + w), over
  // items { t, n } sorted by time (n the weight an admitted request holds:
  // 1 on a route of requests), and the first and last item in it.
  function mostWithin(items, w) {
    let best = { n: 0, from: 0, to: 0 };
    let j = 0, sum = 0;
    for (let i = 0; i < items.length; i++) {
      if (j < i) { j = i; sum = 0; }
      while (j < items.length && items[j].t < items[i].t + w) sum += items[j++].n;
      if (sum > best.n) best = { n: sum, from: items[i].t, to: items[j - 1].t };
      sum -= items[i].n;
    }
    return best;
  }

  // What each lane holds of a mark: the sliding window what the server
  // still counts of it, the fixed window what it admitted of it.
  const slidingHeld = (s) => s.marks.filter((m) => m.ok).map((m) => ({ t: m.t, n: m.kept }));
  const fixedHeld = (s) => s.marks.filter((m) => m.fok).map((m) => ({ t: m.t, n: m.fkept }));

  // partsOf returns every policy's part of a decision: as the server sent
  // them, or, from a server that sends none, the binding policy's numbers
  // under the route's first policy.
  function partsOf(r, ev) {
    if (ev.policies && ev.policies.length) return ev.policies;
    const p = r.policies[0];
    return [{
      name: ev.policy || p.name, limit: ev.limit, windowMs: p.windowMs, allowed: ev.allowed,
      remaining: ev.remaining, retryAfterMs: ev.retryAfterMs, resetAfterMs: ev.resetAfterMs,
    }];
  }

  const policyKey = (ps) => ps.map((p) => p.name + '\u0000' + p.limit + '\u0000' + p.windowMs).join('\u0001');

  // The policies to draw for a key: those its decisions report (a tier may
  // give it others than the route's), else the route's.
  const policiesOf = (r, s) => (s && s.policies) || r.policies;

  // refusers names the policies that refused a decision.
  const refusers = (parts) => parts.filter((p) => !p.allowed).map((p) => p.name || '(unnamed)');

  function onDecision(ev) {
    seenServerTime(ev.at);
    const r = state.byName.get(ev.route);
    state.feed.unshift(ev);
    if (state.feed.length > FEED_ROWS) state.feed.length = FEED_ROWS;
    state.feedDirty = true;
    if (!r) return;

    const fresh = !state.streams.has(ev.route + '\u0000' + ev.key);
    const s = streamFor(ev.route, ev.key);
    const parts = partsOf(r, ev);
    const policies = parts.map((p) => ({ name: p.name, limit: p.limit, windowMs: p.windowMs }));
    if (!s.policies || policyKey(s.policies) !== policyKey(policies)) {
      // New to the page, or under other policies than before: count afresh.
      const known = Math.max(-Infinity, ...s.knownFrom);
      s.policies = policies;
      s.sMost = policies.map(() => null);
      s.refusedBy = policies.map(() => 0);
      s.knownFrom = policies.map(() => known);
    }
    const w = weightOf(ev);
    // Into empty windows: admitted with all but its weight left, or, for a
    // request that can never fit, refused with all of it left.
    const empty = ev.allowed ? parts.every((p) => p.remaining === p.limit - w)
      : !ev.overflow && parts.every((p) => p.remaining === p.limit);
    if (fresh && !empty) {
      // The key's first event seen here was not into empty windows: until
      // a window has passed with the page connected, events from before are
      // missing, so the server's own figures are shown instead.
      const since = state.connectedAt === null ? ev.at : Math.min(ev.at, state.connectedAt);
      s.knownFrom = policies.map((p) => since + p.windowMs);
    } else if (!fresh && empty && state.connectedAt !== null && ev.at >= state.connectedAt && ev.at > state.droppedAt) {
      // An event into empty windows, decided while the page was connected
      // and had missed nothing since: no earlier event counts after it, and
      // every later one reaches the page, in whatever order (a burst's
      // requests are published in any order, so the first seen of a key
      // may not be its first).
      s.knownFrom = s.knownFrom.map((k) => Math.min(k, ev.at));
    }
    // A fixed window is simulated beside a single policy: the fixed window
    // this request falls in, aligned to multiples of the window.
    const one = policies[0];
    const idx = Math.floor(ev.at / one.windowMs);
    const used = s.fCounts.get(idx) || 0;
    const fok = w >= 0 && used + w <= one.limit;
    if (fok) s.fCounts.set(idx, used + w);
    if (s.fCounts.size > 8) {
      for (const k of s.fCounts.keys()) if (k < idx - 4) s.fCounts.delete(k);
    }
    if (fok) s.fAdmitted++; else s.fRefused++;
    if (ev.allowed) { s.admitted++; s.reserved += w; } else s.refused++;
    parts.forEach((p, i) => { if (!p.allowed) s.refusedBy[i]++; });

    // w is the mark's weight; kept and fkept what each lane still counts of
    // it, less what a settle gave back.
    const mark = {
      t: ev.at, ok: ev.allowed, fok, overflow: !!ev.overflow, no: parts.map((p) => !p.allowed), receipt: ev.receipt || '',
      w, kept: ev.allowed ? w : 0, fkept: fok ? w : 0, settled: false,
    };
    s.marks.push(mark);
    if (ev.allowed && mark.receipt) remember(s, mark);
    if (s.marks.length > 1 && s.marks[s.marks.length - 2].t > ev.at) s.marks.sort((a, b) => a.t - b.t);
    const longest = Math.max(...policies.map((p) => p.windowMs));
    const horizon = serverNow() - 3 * longest;
    let cut = 0;
    while (cut < s.marks.length && (s.marks[cut].t < horizon || s.marks.length - cut > MAX_MARKS)) cut++;
    if (cut > 0) s.marks.splice(0, cut);

    const admitted = slidingHeld(s);
    policies.forEach((p, i) => {
      const sm = mostWithin(admitted, p.windowMs);
      if (!s.sMost[i] || sm.n > s.sMost[i].n) s.sMost[i] = sm;
    });
    const fm = mostWithin(fixedHeld(s), one.windowMs);
    if (!s.fMost || fm.n > s.fMost.n) s.fMost = fm;
    s.last = ev;
    s.lastParts = parts;
    keepBudgets(s, ev);

    if (ev.route === state.route && !state.watch) {
      state.watch = ev.key;
    }
    state.dirty = true;
  }

  // remember files an admitted mark under its receipt, forgetting the
  // oldest beyond MAX_RECEIPTS.
  function remember(s, m) {
    const same = s.receipts.get(m.receipt);
    if (same) same.push(m); else s.receipts.set(m.receipt, [m]);
    if (s.receipts.size > MAX_RECEIPTS) s.receipts.delete(s.receipts.keys().next().value);
  }

  // recall returns the latest admitted mark filed under receipt, and
  // unfiles it.
  function recall(s, receipt) {
    const same = s.receipts.get(receipt);
    if (!same) return null;
    const m = same.pop();
    if (same.length === 0) s.receipts.delete(receipt);
    return m;
  }

  // onRefund takes back what a refund gave of the admitted request whose
  // decision had the refund's receipt. All of it: the request no longer
  // counts in the sliding window, nor in the fixed one simulated beside it,
  // and is drawn as given back. Part of it, the weight a request reserved
  // and did not use: the request still counts, at what it kept, and the
  // next refund of it names it by the refund's rest.
  function onRefund(ev) {
    seenServerTime(ev.at);
    const s = state.streams.get(ev.route + '\u0000' + ev.key);
    const m = s && ev.receipt ? recall(s, ev.receipt) : null;
    const given = typeof ev.given === 'number' ? ev.given : (m ? m.kept : 1);
    state.feed.unshift(Object.assign({ refund: true, reserved: m ? m.w : null, given }, ev));
    if (state.feed.length > FEED_ROWS) state.feed.length = FEED_ROWS;
    state.feedDirty = true;
    if (!m) return; // its decision came before this page
    const whole = !ev.rest;
    const fixedIdx = Math.floor(m.t / s.policies[0].windowMs);
    const fixedGiven = whole ? m.fkept : Math.min(given, m.fkept);
    s.given += given;
    m.kept = whole ? 0 : Math.max(0, m.kept - given);
    m.receipt = ev.rest || '';
    if (m.receipt) remember(s, m);
    if (whole) {
      m.ok = false;
      m.back = true;
      s.admitted--;
      s.refunded++;
      if (m.settled) s.settled--;
      m.settled = false;
    } else if (!m.settled) {
      m.settled = true;
      s.settled++;
    }
    if (m.fok) {
      const used = s.fCounts.get(fixedIdx) || 0;
      if (used > 0) s.fCounts.set(fixedIdx, Math.max(0, used - fixedGiven));
      m.fkept -= fixedGiven;
      if (whole) {
        m.fok = false;
        m.fback = true;
        s.fAdmitted--;
      }
    }
    s.lastSettle = { at: ev.at, reserved: m.w, given: m.w - m.kept, kept: m.kept, remaining: ev.remaining };
    keepBudgets(s, ev);
    state.dirty = true;
  }

  // keepBudgets keeps the budgets an event reports, each replacing the one
  // of its name; a settle reports those it changed, the requests and the
  // tokens, and the slots in flight stay as the decision left them.
  function keepBudgets(s, ev) {
    for (const b of ev.budgets || []) s.budgets.set(b.name, Object.assign({ at: ev.at }, b));
  }

  // ---------- stream ----------

  function connect() {
    const es = new EventSource('/live/events');
    const conn = $('conn');
    es.addEventListener('open', () => {
      conn.textContent = 'Live';
      conn.dataset.conn = 'live';
    });
    es.addEventListener('error', () => {
      conn.textContent = es.readyState === EventSource.CLOSED ? 'Disconnected' : 'Reconnecting…';
      conn.dataset.conn = 'lost';
    });
    es.addEventListener('hello', (e) => {
      let h;
      try { h = JSON.parse(e.data); } catch (err) { return; }
      seenServerTime(h.now);
      if (state.connectedAt === null) state.connectedAt = h.now;
    });
    es.addEventListener('decision', (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch (err) { return; }
      onDecision(ev);
    });
    es.addEventListener('refund', (e) => {
      let ev;
      try { ev = JSON.parse(e.data); } catch (err) { return; }
      onRefund(ev);
    });
    es.addEventListener('dropped', (e) => {
      let d;
      try { d = JSON.parse(e.data); } catch (err) { return; }
      state.dropped += d.dropped;
      state.droppedAt = Math.max(state.droppedAt, d.now);
      // Any key may have lost events: trust the server's figures for a window.
      for (const s of state.streams.values()) {
        s.knownFrom = s.policies.map((p, i) => Math.max(s.knownFrom[i], d.now + p.windowMs));
      }
      const p = $('dropped');
      p.hidden = false;
      p.textContent = state.dropped + ' decisions were not shown: this page fell behind the server and they were skipped so that requests are never slowed down.';
    });
  }

  // ---------- requests ----------

  function currentRoute() { return state.byName.get(state.route); }

  // The burst a route admits in full when its windows are empty.
  const smallestLimit = (r) => Math.min(...r.policies.map((p) => p.limit));
  // The burst the page offers: the route's own, or that one.
  const offeredBurst = (r) => r.burst || smallestLimit(r);

  function burstSize() {
    const n = parseInt($('burst-size').value, 10);
    return Number.isFinite(n) && n >= 1 ? Math.min(n, 200) : offeredBurst(currentRoute());
  }

  // shownKey resolves to the key the server's decisions for an API key come
  // with. The server never streams an API key itself, only a fingerprint of
  // it, and it alone says which: the page asks it once per key, sending the
  // key in the header its requests use.
  function shownKey(key) {
    let p = state.shownKeys.get(key);
    if (!p) {
      p = fetch('/live/key', { headers: { [state.keyHeader]: key }, cache: 'no-store' })
        .then((res) => (res.ok ? res.json() : Promise.reject(new Error('key: HTTP ' + res.status))))
        .then((body) => body.key);
      p.catch(() => state.shownKeys.delete(key));
      state.shownKeys.set(key, p);
    }
    return p;
  }

  // fire sends n requests at once and resolves to their status codes (0 for
  // a network error).
  async function fire(n) {
    const r = currentRoute();
    const key = $('key').value.trim();
    const headers = {};
    if (key) {
      headers[state.keyHeader] = key;
      state.ownKey = state.watch = await shownKey(key);
      state.dirty = true;
    }
    let body;
    if (r.form) {
      // A form route: its fields, as the page shows them, in each request.
      headers['Content-Type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(Object.keys(r.form).map((name) => [name, formInput(name).value])).toString();
    }
    const one = () => fetch(r.path, { method: r.method, headers, body, cache: 'no-store' })
      .then((res) => res.arrayBuffer().then(() => res.status, () => res.status), () => 0);
    const all = [];
    for (let i = 0; i < n; i++) all.push(one());
    return Promise.all(all);
  }

  function tally(codes) {
    const ok = codes.filter((c) => c >= 200 && c < 300).length;
    const limited = codes.filter((c) => c === 429).length;
    let s = ok + ' admitted (200), ' + limited + ' refused (429)';
    // Other answers by status, such as a login's 401 for a wrong password.
    const other = new Map();
    for (const c of codes) if (!(c >= 200 && c < 300) && c !== 429) other.set(c, (other.get(c) || 0) + 1);
    for (const [c, n] of [...other].sort((a, b) => a[0] - b[0])) s += ', ' + n + ' answered ' + (c || 'with a network error');
    return s;
  }

  const sleepUntil = (t) => new Promise((res) => setTimeout(res, Math.max(0, t - serverNow())));

  async function busy(fn) {
    if (state.busy) return;
    state.busy = true;
    document.body.dataset.state = 'busy';
    for (const id of ['send-one', 'send-burst', 'send-boundary']) $(id).disabled = true;
    try {
      await fn();
    } catch (err) {
      setText('status', 'Request failed: ' + err);
    } finally {
      for (const id of ['send-one', 'send-burst', 'send-boundary']) $(id).disabled = false;
      state.busy = false;
      document.body.dataset.state = 'idle';
    }
  }

  async function sendOne() {
    const codes = await fire(1);
    setText('status', 'One request: ' + tally(codes) + '.');
  }

  async function sendBurst() {
    const n = burstSize();
    setText('status', 'Sending ' + n + ' requests at once…');
    const codes = await fire(n);
    setText('status', 'Burst of ' + n + ': ' + tally(codes) + '.');
  }

  // sendBoundary fires a burst just before a fixed-window boundary and
  // another just after: the 00:09 / 00:11 pattern a fixed window of 10 s
  // admits twice, and a sliding window only once.
  async function sendBoundary() {
    const r = currentRoute();
    const n = burstSize();
    const key = $('key').value.trim();
    if (key) await shownKey(key); // now, so that neither burst waits for it
    // The boundaries of the shortest window: the soonest, and the one whose
    // bursts the fixed window beside a single policy lets through.
    const w = Math.min(...r.policies.map((p) => p.windowMs));
    const lead = Math.min(1000, w / 10);
    const boundary = Math.ceil((serverNow() + lead + 300) / w) * w;
    const timer = setInterval(() => {
      const left = boundary - lead - serverNow();
      if (left > 0) {
        setText('status', 'Waiting for the fixed-window boundary at ' + clock(boundary) +
          ': first burst of ' + n + ' in ' + ceilSeconds(left) + ' s, the second ' + span(2 * lead) + ' later.');
      }
    }, 200);
    try {
      await sleepUntil(boundary - lead);
      const before = fire(n);
      setText('status', 'First burst sent at ' + clock(serverNow(), true) + '; the second follows after the boundary.');
      await sleepUntil(boundary + lead);
      const after = fire(n);
      const [b, a] = await Promise.all([before, after]);
      setText('status', 'Before the boundary ' + clock(boundary - lead) + ': ' + tally(b) +
        '. After it, ' + clock(boundary + lead) + ': ' + tally(a) + '.');
    } finally {
      clearInterval(timer);
    }
  }

  // ---------- drawing ----------

  function niceStep(total, px) {
    const target = total / Math.max(3, Math.floor(px / 110));
    const steps = [100, 200, 500, 1000, 2000, 5000, 10000, 15000, 20000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000, 21600000, 43200000, 86400000, 172800000, 604800000, 1209600000];
    for (const s of steps) if (s >= target) return s;
    return steps[steps.length - 1];
  }

  // stack places marks into columns of one mark's width and rows upwards, so
  // a burst stays countable; a column taller than the lane shows "+n".
  // kindOf says how to draw a mark: 'ok' (admitted), 'back' (admitted, then
  // given back), 'no' (refused here), or 'other' (refused by another
  // policy; this one had room).
  function stack(marks, x, kindOf, laneBottom, rows) {
    const cols = new Map();
    const out = [];
    const more = new Map();
    for (const m of marks) {
      const px = x(m.t);
      const col = Math.round(px / 10);
      const row = cols.get(col) || 0;
      cols.set(col, row + 1);
      if (row >= rows) {
        more.set(col, (more.get(col) || 0) + 1);
        continue;
      }
      const cx = col * 10;
      const cy = laneBottom - 9 - row * 10.5;
      const kind = kindOf(m);
      out.push(kind === 'ok' || kind === 'back'
        ? '<circle class="m-' + kind + '" cx="' + cx + '" cy="' + cy.toFixed(1) + '" r="4.6"/>'
        : cross(kind, cx, cy));
    }
    moreLabels(out, more, laneBottom - 9 - rows * 10.5 - 2);
    return out.join('');
  }

  const cross = (kind, cx, cy) => '<path class="m-' + kind + '" d="M' + (cx - 3.6) + ' ' + (cy - 3.6).toFixed(1) + 'l7.2 7.2m0-7.2l-7.2 7.2"/>';

  // moreLabels adds to out one "+n" label at height y per cluster of the
  // columns that more counts marks left out of, so labels never overlap.
  function moreLabels(out, more, y) {
    let label = null;
    const flush = () => {
      if (label) out.push('<text class="more" text-anchor="middle" x="' + label.x + '" y="' + y.toFixed(1) + '">+' + label.n + '</text>');
    };
    for (const col of [...more.keys()].sort((a, b) => a - b)) {
      if (label && col * 10 - label.x < 34) {
        label.n += more.get(col);
      } else {
        flush();
        label = { x: col * 10, n: more.get(col) };
      }
    }
    flush();
  }

  // bars draws the marks of a route that weighs its requests, in columns of
  // one bar's width: an admitted request is a bar as tall as its share of
  // the limit, solid for what the lane still counts of it, stacked from the
  // bottom, and dashed for what it reserved and gave back (all of it, when
  // it gave all back), stacked above the solid ones; a refused one is a
  // cross above its column. viewOf says how to draw a mark: { kind, held,
  // back }, kind as stack's. The scale fits the limit, drawn as a line
  // across [left, right], or the tallest column when one is taller (its
  // given-back parts, or a fixed window's excess); crosses that do not fit
  // below the lane's labels show as "+n".
  function bars(marks, x, viewOf, laneBottom, height, limit, left, right) {
    const cols = new Map();
    for (const m of marks) {
      const col = Math.round(x(m.t) / 10);
      let c = cols.get(col);
      if (!c) cols.set(col, (c = { units: 0, views: [] }));
      const v = viewOf(m);
      c.views.push(v);
      if (v.kind === 'ok' || v.kind === 'back') c.units += v.held + v.back;
    }
    // Room above the bars for the most crosses of any column, up to 40%
    // of the lane; more show as "+n".
    const crosses = Math.max(0, ...[...cols.values()].map((c) => c.views.filter((v) => v.kind === 'no' || v.kind === 'other').length));
    const barsHeight = height - Math.min(crosses > 0 ? crosses * 10.5 + 4 : 0, 0.4 * height);
    const top = Math.max(limit, ...[...cols.values()].map((c) => c.units));
    const px = (n) => Math.max(1.5, (n / top) * barsHeight);
    const ly = (laneBottom - (limit / top) * barsHeight).toFixed(1);
    const out = ['<line class="limit-line" x1="' + left + '" x2="' + right + '" y1="' + ly + '" y2="' + ly + '"/>'];
    const more = new Map();
    for (const [col, c] of cols) {
      const cx = col * 10;
      let used = 0;
      const bar = (kind, n) => {
        const h = px(n);
        out.push('<rect class="b-' + kind + '" x="' + (cx - 4) + '" y="' + (laneBottom - used - h).toFixed(1) + '" width="8" height="' + h.toFixed(1) + '" data-weight="' + n + '"/>');
        used += h;
      };
      for (const v of c.views) if (v.kind === 'ok' && (v.held > 0 || v.back === 0)) bar('ok', v.held);
      for (const v of c.views) if ((v.kind === 'ok' || v.kind === 'back') && v.back > 0) bar('back', v.back);
      let cy = laneBottom - used - 6;
      for (const v of c.views) {
        if (v.kind === 'ok' || v.kind === 'back') continue;
        if (cy - 3.6 < laneBottom - height) {
          more.set(col, (more.get(col) || 0) + 1);
          continue;
        }
        out.push(cross(v.kind, cx, cy));
        cy -= 10.5;
      }
    }
    moreLabels(out, more, laneBottom - height - 2);
    return out.join('');
  }

  // What each lane draws of a mark on a route that weighs its requests.
  const slidingView = (m) => (m.ok ? { kind: 'ok', held: m.kept, back: m.w - m.kept } : m.back ? { kind: 'back', held: 0, back: m.w } : { kind: 'no' });
  const fixedView = (m) => (m.fok ? { kind: 'ok', held: m.fkept, back: m.w - m.fkept } : m.fback ? { kind: 'back', held: 0, back: m.w } : { kind: 'no' });

  // heldIn returns the admitted marks in (now − w, now], oldest first, and
  // the weight they still hold.
  function heldIn(s, w, now) {
    const marks = s ? s.marks.filter((m) => m.ok && m.t > now - w && m.t <= now) : [];
    return { marks, held: marks.reduce((a, m) => a + m.kept, 0) };
  }

  // roomIn returns how long until a window of length w that holds in (see
  // heldIn) has room for one more unit of its limit: until enough of its
  // oldest marks have left it; 0 when it has room now.
  function roomIn(inWin, limit, w, now) {
    let held = inWin.held;
    if (held < limit) return 0;
    for (const m of inWin.marks) {
      held -= m.kept;
      if (held < limit) return m.t + w - now;
    }
    return w;
  }

  function drawChart(r, s, now) {
    const chart = $('chart');
    const width = Math.max(640, Math.round(chart.clientWidth || 1000));
    const left = 150, right = 18, top = 26;
    const laneH = 150, gap = 34, axisH = 26;
    const height = top + 2 * laneH + gap + axisH;
    const w = r.windowMs;
    const total = 2.4 * w;
    const t1 = now + 0.12 * w;
    const t0 = t1 - total;
    const plotW = width - left - right;
    const x = (t) => left + ((t - t0) / total) * plotW;
    const lane1 = top, lane2 = top + laneH + gap;
    // The top 30 px of a lane hold its labels and the "+n" above a full
    // column, so they never overlap; 10 rows fit, a burst of 10 in full.
    const rows = Math.floor((laneH - 9 - 30) / 10.5);
    const p = [];

    p.push('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ' + width + ' ' + height + '" width="' + width + '" height="' + height + '" role="img" aria-labelledby="chart-title">');
    p.push('<title id="chart-title">' + esc(chartSummary(r, s)) + '</title>');
    p.push('<defs><clipPath id="plot"><rect x="' + left + '" y="0" width="' + plotW + '" height="' + height + '"/></clipPath></defs>');

    // lanes and their titles
    for (const [y, title, sub] of [[lane1, 'Sliding window', 'keyrate, exact'], [lane2, 'Fixed window', 'simulated']]) {
      p.push('<rect class="lane-bg" x="' + left + '" y="' + y + '" width="' + plotW + '" height="' + laneH + '" rx="4"/>');
      p.push('<text class="lane-title" x="8" y="' + (y + 20) + '">' + title + '</text>');
      p.push('<text class="lane-sub" x="8" y="' + (y + 37) + '">' + sub + '</text>');
      p.push('<text class="lane-sub" x="8" y="' + (y + 54) + '">' + esc(inUnit(r, r.limit)) + ' per ' + esc(span(w)) + '</text>');
    }
    p.push('<text class="lane-sub" x="8" y="' + (lane2 + 71) + '">resets every ' + esc(span(w)) + '</text>');
    p.push('<text class="lane-sub" x="8" y="' + (lane1 + 71) + '">window ends now</text>');

    // time ticks
    const step = niceStep(total, plotW);
    const axisY = lane2 + laneH + 16;
    p.push('<g clip-path="url(#plot)">');
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const tx = x(t).toFixed(1);
      p.push('<line class="tick" x1="' + tx + '" x2="' + tx + '" y1="' + lane1 + '" y2="' + (lane2 + laneH) + '"/>');
      if (x(t) > left + 28 && x(t) < left + plotW - 28) {
        p.push('<text class="tick-label" text-anchor="middle" x="' + tx + '" y="' + axisY + '">' + clock(t) + '</text>');
      }
    }

    // fixed windows: boundaries, the current one shaded, each one's count
    for (let k = Math.floor(t0 / w); k * w <= t1; k++) {
      const a = k * w, b = a + w;
      const xa = x(a), xb = x(b);
      if (a <= now && now < b) {
        p.push('<rect class="fixed-current" x="' + xa.toFixed(1) + '" y="' + lane2 + '" width="' + (xb - xa).toFixed(1) + '" height="' + laneH + '"/>');
      }
      p.push('<line class="boundary" x1="' + xa.toFixed(1) + '" x2="' + xa.toFixed(1) + '" y1="' + (lane2 - 6) + '" y2="' + (lane2 + laneH) + '"/>');
      const n = s ? (s.fCounts.get(k) || 0) : 0;
      if (n > 0 && x(a) + 40 < left + plotW) {
        p.push('<text class="fixed-count" x="' + (Math.max(xa, left) + 5).toFixed(1) + '" y="' + (lane2 + 14) + '">' + fmtOf(r)(n) + ' / ' + fmtOf(r)(r.limit) + '</text>');
      }
    }

    // the sliding window (now - w, now]
    const xs = x(now - w), xn = x(now);
    p.push('<rect class="band" x="' + xs.toFixed(1) + '" y="' + (lane1 + 1) + '" width="' + (xn - xs).toFixed(1) + '" height="' + (laneH - 2) + '" rx="3"/>');
    const fmt = fmtOf(r);
    let inWin = fmt(heldIn(s, w, now).held) + ' of ' + inUnit(r, r.limit);
    if (s && now < s.knownFrom[0]) inWin = fmt(r.limit - s.last.remaining) + ' of ' + inUnit(r, r.limit) + ' (server’s count)';
    p.push('<text class="band-label" x="' + (xs + 8).toFixed(1) + '" y="' + (lane1 + 16) + '">window (now − ' + esc(span(w)) + ', now]: ' + esc(inWin) + '</text>');

    // excess in the fixed lane
    if (s && s.fMost && s.fMost.n > r.limit && s.fMost.to >= t0) {
      const xa = x(s.fMost.from) - 8, xb = x(s.fMost.to) + 8;
      p.push('<rect class="excess" x="' + xa.toFixed(1) + '" y="' + (lane2 + 22) + '" width="' + (xb - xa).toFixed(1) + '" height="' + (laneH - 26) + '" rx="4"/>');
      const label = inUnit(r, s.fMost.n) + ' admitted within ' + span(s.fMost.to - s.fMost.from) + ': ' + fmt(s.fMost.n - r.limit) + ' over the limit';
      const anchorEnd = xb > left + plotW / 2;
      p.push('<text class="excess-label" text-anchor="' + (anchorEnd ? 'end' : 'start') + '" x="' + (anchorEnd ? xb : xa).toFixed(1) + '" y="' + (lane2 - 8) + '">' + esc(label) + '</text>');
    }

    // now, beneath the marks, so a burst that just happened stays readable
    p.push('<line class="now" x1="' + xn.toFixed(1) + '" x2="' + xn.toFixed(1) + '" y1="' + (lane1 - 8) + '" y2="' + (lane2 + laneH) + '"/>');
    p.push('<text class="now-label" text-anchor="middle" x="' + xn.toFixed(1) + '" y="' + (lane1 - 11) + '">now</text>');

    // marks
    if (s) {
      const visible = s.marks.filter((m) => m.t >= t0 - 1000 && m.t <= t1);
      if (weighted(r)) {
        p.push('<g data-lane="sliding">' + bars(visible, x, slidingView, lane1 + laneH - 3, laneH - 33, r.limit, left, left + plotW) + '</g>');
        p.push('<g data-lane="fixed">' + bars(visible, x, fixedView, lane2 + laneH - 3, laneH - 33, r.limit, left, left + plotW) + '</g>');
      } else {
        p.push('<g data-lane="sliding">' + stack(visible, x, (m) => (m.ok ? 'ok' : (m.back ? 'back' : 'no')), lane1 + laneH, rows) + '</g>');
        p.push('<g data-lane="fixed">' + stack(visible, x, (m) => (m.fok ? 'ok' : (m.fback ? 'back' : 'no')), lane2 + laneH, rows) + '</g>');
      }
    }
    p.push('</g>');

    if (!s) {
      p.push('<text class="empty" text-anchor="middle" x="' + (left + plotW / 2) + '" y="' + (lane1 + laneH / 2 + 40) + '">No requests on this route yet: press a button, or use curl.</text>');
    }
    p.push('</svg>');
    chart.innerHTML = p.join('');
  }

  function chartSummary(r, s) {
    if (!s) return 'Timeline of ' + r.path + ': no requests yet.';
    return 'Timeline of ' + r.path + ' for key ' + s.key + ': sliding window admitted ' + s.admitted +
      ' and refused ' + s.refused + '; a fixed window would have admitted ' + s.fAdmitted +
      ' and refused ' + s.fRefused + '.';
  }

  function drawStats(r, s, now) {
    const w = r.windowMs;
    const fmt = fmtOf(r);
    const outOf = (n) => fmt(n) + ' / ' + fmt(r.limit);
    // A route that weighs its requests says its unit once, in the labels.
    const unit = weighted(r) ? ' (' + r.unit + ')' : '';
    for (const [id, label] of [['s-inwindow', 'In window now'], ['f-inwindow', 'This fixed window'], ['s-reserved', 'Reserved'], ['s-given', 'Unused, given back'], ['s-cost', 'Cost']]) {
      setText(id + '-label', label + unit);
    }
    setText('s-most-label', 'Most in any ' + span(w) + unit);
    setText('f-most-label', 'Most in any ' + span(w) + unit);
    const inWin = heldIn(s, w, now);
    const partial = s && now < s.knownFrom[0];
    if (partial) {
      // Joined mid-window: the server's figures as of its last decision.
      const l = s.last;
      setText('s-inwindow', outOf(r.limit - l.remaining) + '*');
      setText('s-remaining', fmt(l.remaining) + '*');
      const left = l.at + l.retryAfterMs - now;
      setText('s-retry', !l.allowed && left > 0 ? ceilSeconds(left) + ' s' : 'none');
    } else {
      setText('s-inwindow', outOf(inWin.held));
      setText('s-remaining', fmt(Math.max(0, r.limit - inWin.held)));
      // The request after the limit fits once enough of the oldest admitted ones leave.
      const room = roomIn(inWin, r.limit, w, now);
      setText('s-retry', room > 0 ? ceilSeconds(room) + ' s' : 'none');
    }
    setText('s-admitted', String(s ? s.admitted : 0));
    setText('s-refused', String(s ? s.refused : 0));
    setText('s-refunded', String(s ? s.refunded : 0));
    setText('s-settled', String(s ? s.settled : 0));
    setText('s-reserved', fmt(s ? s.reserved : 0));
    setText('s-given', fmt(s ? s.given : 0));
    setText('s-cost', fmt(s ? s.reserved - s.given : 0));
    setText('s-most', fmt(s && s.sMost[0] ? s.sMost[0].n : 0));

    const idx = Math.floor(now / w);
    const fNow = s ? (s.fCounts.get(idx) || 0) : 0;
    setText('f-inwindow', outOf(fNow));
    setText('f-reset', ceilSeconds((idx + 1) * w - now) + ' s');
    setText('f-every', 'every ' + span(w));
    setText('f-admitted', String(s ? s.fAdmitted : 0));
    setText('f-refused', String(s ? s.fRefused : 0));
    setText('f-most', fmt(s && s.fMost ? s.fMost.n : 0));

    const sv = $('s-verdict'), fv = $('f-verdict');
    if (!s) {
      sv.dataset.kind = ''; fv.dataset.kind = '';
      setText('s-verdict', '');
      setText('f-verdict', '');
      setText('s-last', '');
      setText('s-settle', '');
      return;
    }
    if (s.sMost[0].n > r.limit) {
      sv.dataset.kind = 'excess';
      setText('s-verdict', inUnit(r, s.sMost[0].n) + ' admitted within ' + span(w) + ': over the limit of ' + fmt(r.limit) + '.');
    } else {
      sv.dataset.kind = 'held';
      setText('s-verdict', 'Never more than ' + inUnit(r, r.limit) + ' in any ' + span(w) + '.');
    }
    if (s.fMost.n > r.limit) {
      fv.dataset.kind = 'excess';
      setText('f-verdict', inUnit(r, s.fMost.n) + ' admitted within ' + span(s.fMost.to - s.fMost.from) + ': ' +
        fmt(s.fMost.n - r.limit) + ' over the limit of ' + fmt(r.limit) + ' per ' + span(w) + '.');
    } else {
      fv.dataset.kind = '';
      setText('f-verdict', 'No excess yet: try “Burst at the boundary”.');
    }
    const l = s.last;
    let last = 'Last decision at ' + clock(l.at, true) + ': ' + (l.allowed ? 'admitted' : 'refused');
    if (weighted(r)) {
      last += ' at ' + inUnit(r, weightOf(l));
      if (!l.allowed && l.retryAfterMs === 0 && !l.overflow) last += ', which can never fit';
    }
    last += ', server said Remaining ' + fmt(l.remaining);
    if (!l.allowed && l.retryAfterMs > 0) last += ', Retry-After ' + ceilSeconds(l.retryAfterMs) + ' s (exactly ' + (l.retryAfterMs / 1000).toFixed(3) + ' s)';
    if (l.overflow) last += ' (the limiter is tracking as many keys as it may)';
    setText('s-last', last + '.' + (partial ? ' * This page joined mid-window, so these are the server’s figures as of that decision; live counts resume at ' + clock(s.knownFrom[0]) + '.' : ''));
    setText('s-settle', weighted(r) ? settleText(r, s.lastSettle) : '');
  }

  // settleText says what the last settle of a route that weighs its
  // requests did: what the request reserved, gave back and kept.
  function settleText(r, l) {
    if (!l) return 'No request has settled yet: each gives back what it reserved and did not use.';
    return 'Last settle at ' + clock(l.at, true) + ': reserved ' + inUnit(r, l.reserved) + ', gave back ' +
      (l.kept === 0 ? 'all of them' : grouped(l.given)) + ', cost ' + grouped(l.kept) + '; server said Remaining ' + grouped(l.remaining) + '.';
  }

  // ---------- several policies ----------

  // drawPolicyChart draws one lane per policy, one above the other, each on
  // its own time axis (2.4 of its windows), so that a 10 s window and an
  // hour's are both readable. A request one policy refused is a red cross
  // in that policy's lane and a grey one in the lanes of those that had
  // room: it counts in none of them.
  function drawPolicyChart(r, s, now, policies) {
    const chart = $('chart');
    const width = Math.max(640, Math.round(chart.clientWidth || 1000));
    const left = 170, right = 18, top = 26;
    const laneH = 118, axisH = 22, gap = 22;
    const height = top + policies.length * (laneH + axisH + gap) - gap + 4;
    const plotW = width - left - right;
    const rows = Math.floor((laneH - 9 - 30) / 10.5);
    const parts = s ? s.lastParts : null;
    const p = [];
    p.push('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ' + width + ' ' + height + '" width="' + width + '" height="' + height + '" role="img" aria-labelledby="chart-title">');
    p.push('<title id="chart-title">' + esc(policySummary(r, s, policies)) + '</title>');
    p.push('<defs><clipPath id="plot"><rect x="' + left + '" y="0" width="' + plotW + '" height="' + height + '"/></clipPath></defs>');

    policies.forEach((pol, i) => {
      const y = top + i * (laneH + axisH + gap);
      const w = pol.windowMs;
      const total = 2.4 * w;
      const t1 = now + 0.12 * w;
      const t0 = t1 - total;
      const x = (t) => left + ((t - t0) / total) * plotW;
      const refused = parts && parts[i] && !parts[i].allowed;
      p.push('<g class="policy-lane" data-policy="' + esc(pol.name) + '"' + (refused ? ' data-refused="1"' : '') + '>');
      p.push('<rect class="lane-bg" x="' + left + '" y="' + y + '" width="' + plotW + '" height="' + laneH + '" rx="4"/>');
      p.push('<text class="lane-title" x="8" y="' + (y + 20) + '">' + esc(pol.name || r.name) + '</text>');
      p.push('<text class="lane-sub" x="8" y="' + (y + 37) + '">' + esc(inUnit(r, pol.limit)) + ' per ' + esc(span(w)) + '</text>');
      if (parts && parts[i]) {
        p.push('<text class="' + (refused ? 'lane-refused' : 'lane-sub') + '" x="8" y="' + (y + 54) + '">' +
          (refused ? '✕ refused the last request' : (s.last.allowed ? 'admitted the last request' : 'had room for the last request')) + '</text>');
      }

      p.push('<g clip-path="url(#plot)">');
      const step = niceStep(total, plotW);
      for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
        const tx = x(t).toFixed(1);
        p.push('<line class="tick" x1="' + tx + '" x2="' + tx + '" y1="' + y + '" y2="' + (y + laneH) + '"/>');
        if (x(t) > left + 28 && x(t) < left + plotW - 28) {
          p.push('<text class="tick-label" text-anchor="middle" x="' + tx + '" y="' + (y + laneH + 15) + '">' + clock(t) + '</text>');
        }
      }
      const xs = x(now - w), xn = x(now);
      p.push('<rect class="band" x="' + xs.toFixed(1) + '" y="' + (y + 1) + '" width="' + (xn - xs).toFixed(1) + '" height="' + (laneH - 2) + '" rx="3"/>');
      const label = 'window (now − ' + span(w) + ', now]: ' + inWindowText(r, s, i, pol, now, ' of ');
      p.push('<text class="band-label" x="' + (Math.max(xs, left) + 8).toFixed(1) + '" y="' + (y + 16) + '">' + esc(label) + '</text>');
      p.push('<line class="now" x1="' + xn.toFixed(1) + '" x2="' + xn.toFixed(1) + '" y1="' + (y - (i === 0 ? 8 : 0)) + '" y2="' + (y + laneH) + '"/>');
      if (i === 0) p.push('<text class="now-label" text-anchor="middle" x="' + xn.toFixed(1) + '" y="' + (y - 11) + '">now</text>');
      if (s) {
        const visible = s.marks.filter((m) => m.t >= t0 - 1000 && m.t <= t1);
        if (weighted(r)) {
          const view = (m) => (m.ok || m.back ? slidingView(m) : { kind: m.no && m.no[i] ? 'no' : 'other' });
          p.push(bars(visible, x, view, y + laneH - 3, laneH - 33, pol.limit, left, left + plotW));
        } else {
          p.push(stack(visible, x, (m) => (m.ok ? 'ok' : m.back ? 'back' : (m.no && m.no[i] ? 'no' : 'other')), y + laneH, rows));
        }
      }
      p.push('</g></g>');
    });
    if (!s) {
      p.push('<text class="empty" text-anchor="middle" x="' + (left + plotW / 2) + '" y="' + (top + laneH / 2 + 40) + '">No requests on this route yet: press a button, or use curl.</text>');
    }
    p.push('</svg>');
    chart.innerHTML = p.join('');
  }

  // inWindowText says how many events policy i holds now: counted from the
  // marks, or the server's figure while the page has not yet seen a whole
  // window (see knownFrom).
  function inWindowText(r, s, i, pol, now, sep) {
    const fmt = fmtOf(r);
    if (s && now < s.knownFrom[i] && s.lastParts && s.lastParts[i]) {
      return fmt(pol.limit - s.lastParts[i].remaining) + sep + inUnit(r, pol.limit) + '*';
    }
    return fmt(heldIn(s, pol.windowMs, now).held) + sep + inUnit(r, pol.limit);
  }

  function policySummary(r, s, policies) {
    const names = policies.map((p) => p.name + ' (' + p.limit + ' per ' + span(p.windowMs) + ')').join(' and ');
    if (!s) return 'Timeline of ' + r.path + ' under ' + names + ': no requests yet.';
    return 'Timeline of ' + r.path + ' for key ' + s.key + ' under ' + names + ': ' + s.admitted + ' admitted, ' +
      s.refused + ' refused; ' + policies.map((p, i) => p.name + ' refused ' + s.refusedBy[i]).join(', ') + '.';
  }

  // drawPolicyTable fills the table of a route under several policies: a
  // row per policy with its own numbers, so that a refusal shows whose it was.
  function drawPolicyTable(r, s, now, policies) {
    const body = $('policy-rows');
    const shape = policyKey(policies);
    if (body.dataset.shape !== shape) {
      body.dataset.shape = shape;
      body.replaceChildren(...policies.map((pol) => {
        const tr = document.createElement('tr');
        tr.dataset.policy = pol.name;
        for (const c of ['p-name', 'p-limit', 'p-inwindow', 'p-remaining', 'p-retry', 'p-refused', 'p-most', 'p-verdict']) {
          const td = document.createElement('td');
          td.className = c;
          tr.append(td);
        }
        return tr;
      }));
    }
    policies.forEach((pol, i) => {
      const tr = body.children[i];
      const cell = (c, text) => { const td = tr.querySelector('.' + c); if (td.textContent !== text) td.textContent = text; };
      const w = pol.windowMs;
      const inWin = heldIn(s, w, now);
      const partial = s && now < s.knownFrom[i] && s.lastParts && s.lastParts[i];
      const fmt = fmtOf(r);
      cell('p-name', pol.name || r.name);
      cell('p-limit', inUnit(r, pol.limit) + ' per ' + span(w));
      cell('p-inwindow', inWindowText(r, s, i, pol, now, ' / '));
      if (partial) {
        const l = s.lastParts[i];
        cell('p-remaining', fmt(l.remaining) + '*');
        const left = s.last.at + l.retryAfterMs - now;
        cell('p-retry', !l.allowed && left > 0 ? ceilSeconds(left) + ' s' : 'none');
      } else {
        cell('p-remaining', fmt(Math.max(0, pol.limit - inWin.held)));
        // One more fits this policy once enough of its oldest admitted events leave.
        const room = roomIn(inWin, pol.limit, w, now);
        cell('p-retry', room > 0 ? ceilSeconds(room) + ' s' : 'none');
      }
      cell('p-refused', String(s ? s.refusedBy[i] : 0));
      const most = s && s.sMost[i] ? s.sMost[i].n : 0;
      cell('p-most', fmt(most));
      cell('p-verdict', !s ? '' : most > pol.limit ? '⚠ ' + fmt(most) + ' within ' + span(w) + ': over the limit' : '✓ never over');
      tr.dataset.refused = s && s.lastParts && s.lastParts[i] && !s.lastParts[i].allowed ? '1' : '';
    });
    setText('m-admitted', String(s ? s.admitted : 0));
    setText('m-refused', String(s ? s.refused : 0));
    setText('m-refunded', String(s ? s.refunded : 0));
    if (!s) {
      setText('m-last', '');
      return;
    }
    const l = s.last;
    let last = 'Last decision at ' + clock(l.at, true) + ': ';
    if (l.allowed) {
      last += 'admitted by every policy';
    } else {
      last += 'refused by ' + refusers(s.lastParts).join(' and ');
      if (l.retryAfterMs > 0) last += ', Retry-After ' + ceilSeconds(l.retryAfterMs) + ' s (when it fits every policy)';
    }
    if (l.overflow) last += ' (the limiter is tracking as many keys as it may)';
    const partial = s.knownFrom.some((k) => now < k);
    setText('m-last', last + '.' + (partial ? ' * This page joined mid-window: the server’s figures as of that decision.' : ''));
  }

  function drawKeys() {
    if (state.drawnKeysVersion === state.keysVersion && $('watch').value === state.watch) return;
    state.drawnKeysVersion = state.keysVersion;
    const sel = $('watch');
    const keys = [...(state.keysByRoute.get(state.route) || [])].sort();
    if (state.watch && !keys.includes(state.watch)) keys.unshift(state.watch);
    sel.replaceChildren();
    if (keys.length === 0) {
      const o = document.createElement('option');
      o.value = '';
      o.textContent = '(no traffic yet)';
      sel.append(o);
    }
    for (const k of keys) {
      const o = document.createElement('option');
      o.value = k;
      o.textContent = k;
      sel.append(o);
    }
    sel.value = state.watch;
  }

  // byWhom names the policies that refused ev, when its route has several.
  function byWhom(ev) {
    const parts = ev.policies || [];
    return parts.length > 1 ? ' by ' + refusers(parts).join(' and ') : '';
  }

  // settledText says what a refund on a route that weighs its requests gave
  // back: part of what the request held, or all of it.
  function settledText(r, ev) {
    const held = weightOf(ev);
    const of = ev.reserved !== null && ev.reserved !== held ? ' (it reserved ' + grouped(ev.reserved) + ')' : '';
    if (!ev.rest) return '○ given back: all ' + inUnit(r, ev.given) + ' it held' + of;
    return '◐ settled: ' + grouped(ev.given) + ' of ' + inUnit(r, held) + ' given back, ' + grouped(held - ev.given) + ' kept' + of;
  }

  function drawFeed() {
    if (!state.feedDirty) return;
    state.feedDirty = false;
    const body = $('feed');
    const rows = state.feed.map((ev) => {
      const r = state.byName.get(ev.route);
      const tr = document.createElement('tr');
      const never = !ev.allowed && !ev.refund && !ev.overflow && ev.retryAfterMs === 0; // 413: no wait would help
      let result = ev.allowed ? '● admitted' : (ev.overflow ? '✕ 429 refused (too many keys)' : never ? '✕ 413 can never fit' : '✕ 429 refused' + byWhom(ev));
      if (weighted(r) && !ev.refund) result += ', ' + inUnit(r, weightOf(ev)) + (ev.allowed ? ' reserved' : '');
      if (ev.refund) result = weighted(r) ? settledText(r, ev) : '○ given back (answered below 400)';
      const cells = [
        clock(ev.at, true),
        r ? r.method + ' ' + r.path : ev.route,
        ev.key,
        result,
        fmtOf(r)(ev.remaining),
        ev.allowed || ev.refund || never ? '' : ceilSeconds(ev.retryAfterMs) + ' s',
      ];
      cells.forEach((text, i) => {
        const td = document.createElement('td');
        td.textContent = text;
        if (i === 2) { td.className = 'key'; td.title = text; }
        if (i === 3) td.className = ev.refund ? 'r-back' : (ev.allowed ? 'r-ok' : 'r-no');
        tr.append(td);
      });
      return tr;
    });
    body.replaceChildren(...rows);
  }

  let lastDraw = 0;
  function draw(ts) {
    requestAnimationFrame(draw);
    if (ts - lastDraw < DRAW_EVERY_MS) return;
    lastDraw = ts;
    const r = currentRoute();
    if (!r) return;
    const now = serverNow();
    const s = state.watch ? state.streams.get(r.name + '\u0000' + state.watch) : undefined;
    const policies = policiesOf(r, s);
    drawKeys();
    if (policies.length > 1) {
      document.body.dataset.view = 'policies';
      drawPolicyTable(r, s, now, policies);
      drawPolicyChart(r, s, now, policies);
    } else {
      // One policy: the sliding window beside a simulated fixed one.
      document.body.dataset.view = 'single';
      const one = { name: r.name, method: r.method, path: r.path, unit: r.unit, limit: policies[0].limit, windowMs: policies[0].windowMs };
      drawStats(one, s, now);
      drawChart(one, s, now);
    }
    drawBudgets(s, now);
    drawFeed();
    state.dirty = false;
  }

  // drawBudgets fills the table of the key's budgets, on a route whose
  // requests count against several at once: a row each, with how much is
  // used, what remains and when its window empties, as its last event left
  // it, and a meter of the share used.
  function drawBudgets(s, now) {
    const box = $('budgets');
    const list = s ? [...s.budgets.values()] : [];
    box.hidden = list.length === 0;
    if (box.hidden) return;
    const body = $('budget-rows');
    const shape = list.map((b) => b.name).join('\u0000');
    if (body.dataset.shape !== shape) {
      body.dataset.shape = shape;
      body.replaceChildren(...list.map((b) => {
        const tr = document.createElement('tr');
        tr.dataset.budget = b.name;
        for (const c of ['b-name', 'b-limit', 'b-used', 'b-remaining', 'b-reset', 'b-meter']) {
          const td = document.createElement('td');
          td.className = c;
          tr.append(td);
        }
        const meter = document.createElement('meter');
        meter.min = 0;
        tr.querySelector('.b-meter').append(meter);
        return tr;
      }));
    }
    list.forEach((b, i) => {
      const tr = body.children[i];
      const cell = (c, text) => { const td = tr.querySelector('.' + c); if (td.textContent !== text) td.textContent = text; };
      const used = Math.max(0, b.limit - b.remaining);
      cell('b-name', b.name + (b.windowMs ? ' per ' + span(b.windowMs) : ' at once'));
      cell('b-limit', grouped(b.limit));
      cell('b-used', grouped(used));
      cell('b-remaining', grouped(b.remaining));
      const left = b.at + (b.resetAfterMs || 0) - now;
      cell('b-reset', b.windowMs && used > 0 ? (left > 0 ? span(Math.ceil(left / 100) * 100) : 'now') : '–');
      tr.classList.toggle('refusing', !b.allowed);
      const meter = tr.querySelector('meter');
      meter.max = b.limit;
      meter.value = used;
    });
  }

  // ---------- start ----------

  // formInput returns the input of the current route's form field name.
  const formInput = (name) => $('form-' + name);

  function selectRoute(name) {
    state.route = name;
    const r = currentRoute();
    $('burst-size').value = String(offeredBurst(r));
    document.body.dataset.refunds = r.refunds ? '1' : '';
    document.body.dataset.settles = weighted(r) ? '1' : '';
    setText('route-note', r.note || '');
    const fields = Object.entries(r.form || {}).flatMap(([field, value]) => {
      const label = document.createElement('label');
      label.htmlFor = 'form-' + field;
      label.textContent = field;
      const input = document.createElement('input');
      input.id = 'form-' + field;
      input.type = 'text';
      input.autocomplete = 'off';
      input.spellcheck = false;
      input.value = value;
      return [label, input];
    });
    $('form-fields').replaceChildren(...fields);
    const keys = state.keysByRoute.get(name);
    if (!keys || !keys.has(state.watch)) {
      const own = state.ownKey;
      state.watch = keys && keys.has(own) ? own : (keys ? [...keys][0] : '');
    }
    state.drawnKeysVersion = -1;
    setText('view-title', 'Timeline of ' + r.method + ' ' + r.path);
    const form = Object.entries(r.form || {}).map(([field, value]) => ' -d ' + field + '=' + value).join('');
    const method = r.form || r.method === 'GET' ? '' : ' -X ' + r.method;
    setText('curl-hint', 'curl -i' + method + ' -H \'' + state.keyHeader + ': alice\'' + form + ' ' + location.origin + r.path);
  }

  async function start() {
    const sent = Date.now();
    const res = await fetch('/live/config', { cache: 'no-store' });
    if (!res.ok) throw new Error('config: HTTP ' + res.status);
    const cfg = await res.json();
    const got = Date.now();
    state.offset = cfg.now - (sent + got) / 2;
    state.keyHeader = cfg.keyHeader;
    state.routes = cfg.routes;
    const sel = $('route');
    for (const r of cfg.routes) {
      state.byName.set(r.name, r);
      const o = document.createElement('option');
      o.value = r.name;
      o.textContent = r.method + ' ' + r.path + ' (' + r.policies.map((p) => inUnit(r, p.limit) + ' per ' + span(p.windowMs)).join(' and ') + ')';
      sel.append(o);
    }
    // Without ?route=, show the route with the shortest window: its next
    // fixed-window boundary is the soonest, so "Burst at the boundary" waits least.
    const wanted = new URLSearchParams(location.search).get('route');
    const shortestOf = (r) => Math.min(...r.policies.map((p) => p.windowMs));
    const shortest = cfg.routes.reduce((a, b) => (shortestOf(b) < shortestOf(a) ? b : a));
    const first = state.byName.has(wanted) ? wanted : shortest.name;
    sel.value = first;
    $('key').value = 'page-' + Math.random().toString(36).slice(2, 7);
    selectRoute(first);

    sel.addEventListener('change', () => selectRoute(sel.value));
    $('watch').addEventListener('change', () => { state.watch = $('watch').value; state.dirty = true; });
    $('key').addEventListener('change', () => {
      const key = $('key').value.trim();
      state.ownKey = '';
      if (key) shownKey(key).then((k) => { if ($('key').value.trim() === key) state.ownKey = k; }, () => {});
    });
    $('send-one').addEventListener('click', () => busy(sendOne));
    $('send-burst').addEventListener('click', () => busy(sendBurst));
    $('send-boundary').addEventListener('click', () => busy(sendBoundary));

    connect();
    setText('status', 'Ready. Each button sends real requests with the API key above; watch both lanes.');
    document.body.dataset.state = 'idle';
    requestAnimationFrame(draw);
  }

  document.addEventListener('DOMContentLoaded', () => {
    start().catch((err) => {
      setText('status', 'Could not load the page’s configuration: ' + err.message);
      document.body.dataset.state = 'error';
    });
  });
})();
