package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLivePagePolicies drives the page on /api/export, a route under two
// policies ("export-burst" 2 per 10 s, "export-hourly" 5 per hour), as a
// user would, with three bursts 10 s apart on a fresh key: export-burst
// refuses the third request of each of the first two, and export-hourly the
// second of the last, while export-burst has room. The page shows a lane
// and a table row per policy, and every refusal as a red cross in the lane
// of the policy that refused it and a grey one in the other's.
//
// A burst's requests are decided concurrently, so which of them the page
// shows last is the scheduler's choice; each burst is therefore followed by
// one lone request, refused for certain, that the page must show last.
func TestLivePagePolicies(t *testing.T) {
	browser := findChromium(t)
	base := startDemo(t)
	export := demoRoute(t, base, "export")
	if len(export.Policies) != 2 || export.Policies[0] != (policy{"export-burst", 2, 10_000}) ||
		export.Policies[1] != (policy{"export-hourly", 5, 3_600_000}) {
		t.Fatalf("route export has policies %+v, want export-burst 2 per 10 s and export-hourly 5 per hour", export.Policies)
	}
	short := 10 * time.Second

	ctx, console := openPage(t, browser, base+"/?route=export", 2*time.Minute, "live-page-policies.png")
	if got := selection(t, ctx); got != (selected{"export", "2"}) {
		t.Errorf("the page opens on %+v, want route export with a burst of its smallest limit, 2", got)
	}
	setInput(t, ctx, "key", "e2e-policies")

	// burst sends n requests at once and returns once the page shows all
	// the decisions so far, total, with the instant they were all made by.
	burst := func(n, total int) (policiesShown, time.Time) {
		t.Helper()
		setInput(t, ctx, "burst-size", fmt.Sprint(n))
		click(t, ctx, "send-burst")
		got := waitForPolicies(t, ctx, total, 30*time.Second)
		return got, time.Now()
	}
	// windowPassed waits until export-burst's window has let go of every
	// request made by done, and the page says so.
	windowPassed := func(done time.Time) {
		t.Helper()
		time.Sleep(time.Until(done.Add(short + 100*time.Millisecond)))
		waitFor[bool](t, ctx, "the page to show export-burst's window empty", 10*time.Second,
			`document.querySelector('#policy-rows tr[data-policy="export-burst"] .p-remaining').textContent === '2'`)
	}

	_, done := burst(3, 3)
	got, _ := burst(1, 4)
	want := []policyRow{
		{"export-burst", "2 per 10 s", "2 / 2", "0", 2, 2, true},
		{"export-hourly", "5 per 60 min", "2 / 5", "3", 0, 2, false},
	}
	got.check(t, "after the first burst of 3 and one more", want, 2, 2, "refused by export-burst")
	if fmt.Sprint(got.Lanes) != `[export-burst: 2 ok, 2 refused here, 0 refused by another export-hourly: 2 ok, 0 refused here, 2 refused by another]` {
		t.Errorf("after the first burst of 3 and one more, the lanes show %s", got.Lanes)
	}

	windowPassed(done)
	_, done = burst(3, 7)
	got, _ = burst(1, 8)
	want = []policyRow{
		{"export-burst", "2 per 10 s", "2 / 2", "0", 4, 2, true},
		{"export-hourly", "5 per 60 min", "4 / 5", "1", 0, 4, false},
	}
	got.check(t, "after the second burst of 3 and one more", want, 4, 4, "refused by export-burst")

	windowPassed(done)
	burst(2, 10)
	got, _ = burst(1, 11)
	want = []policyRow{
		{"export-burst", "2 per 10 s", "1 / 2", "1", 4, 2, false},
		{"export-hourly", "5 per 60 min", "5 / 5", "0", 2, 5, true},
	}
	got.check(t, "after the last burst of 2 and one more", want, 5, 6, "refused by export-hourly")
	if !strings.HasPrefix(got.HourlyRetry, "35") || !strings.HasSuffix(got.HourlyRetry, " s") {
		t.Errorf("export-hourly's Retry-After %q, want some 3580 s: until the first request leaves the hour", got.HourlyRetry)
	}
	// On export-hourly's axis (2.4 hours) the 11 requests of these 25 s
	// share a column or two, taller than a lane: the marks that do not fit
	// are counted in a "+n" above them.
	if len(got.Lanes) != 2 || got.Lanes[0].String() != `export-burst: 5 ok, 4 refused here, 2 refused by another` {
		t.Errorf("after the last burst, the lanes show %v", got.Lanes)
	} else if h := got.Lanes[1]; h.Policy != "export-hourly" || h.OK+h.Here+h.Other+h.More != 11 || h.OK > 5 || h.Here > 2 || h.Other > 4 {
		t.Errorf("after the last burst, export-hourly's lane shows %v; want 11 marks in all: at most 5 ok, 2 refused here, 4 refused by another", h)
	}
	if got.Feed != "✕ 429 refused by export-hourly" {
		t.Errorf("the latest decision in the feed is %q, want it refused by export-hourly", got.Feed)
	}
	if want := fingerprint("e2e-policies"); got.Watch != want || strings.Contains(got.Shown, "e2e-policies") {
		t.Errorf("page shows key %q (want %q), or the key itself somewhere: %q", got.Watch, want, got.Shown)
	}
	console.check(t)
}

// policyRow is one row of the page's table of policies.
type policyRow struct {
	Name, Limit, InWindow, Remaining string
	Refused, Most                    int
	RefusedLast                      bool
}

// policiesShown is what the page displays on a route under several
// policies, for the key it shows.
type policiesShown struct {
	Rows               []policyRow
	Admitted, Refused  int
	Last, HourlyRetry  string
	Lanes              []lane
	Feed, Watch, Shown string
}

// lane counts the marks in a policy's lane of the chart: admitted, refused
// by this policy, refused by another, and those a full column of marks
// shows only as "+n".
type lane struct {
	Policy                string
	OK, Here, Other, More int
}

func (l lane) String() string {
	s := fmt.Sprintf("%s: %d ok, %d refused here, %d refused by another", l.Policy, l.OK, l.Here, l.Other)
	if l.More > 0 {
		s += fmt.Sprintf(", %d more", l.More)
	}
	return s
}

func (got policiesShown) check(t *testing.T, when string, rows []policyRow, admitted, refused int, last string) {
	t.Helper()
	if fmt.Sprint(got.Rows) != fmt.Sprint(rows) {
		t.Errorf("%s, the table shows\n%+v\nwant\n%+v", when, got.Rows, rows)
	}
	if got.Admitted != admitted || got.Refused != refused || !strings.Contains(got.Last, last) {
		t.Errorf("%s: %d admitted, %d refused, %q; want %d, %d and %q", when, got.Admitted, got.Refused, got.Last, admitted, refused, last)
	}
}

// waitForPolicies waits until the page is idle and shows n decisions for
// its key, then returns what it shows.
func waitForPolicies(t *testing.T, ctx context.Context, n int, timeout time.Duration) policiesShown {
	t.Helper()
	return waitFor[policiesShown](t, ctx, fmt.Sprintf("the page to show %d decisions under both policies", n), timeout, fmt.Sprintf(`(() => {
		const text = (id) => document.getElementById(id).textContent;
		const num = (id) => parseInt(text(id), 10);
		if (document.body.dataset.state !== 'idle' || document.body.dataset.view !== 'policies' ||
			num('m-admitted') + num('m-refused') < %d) return false;
		const cell = (tr, c) => tr.querySelector('.' + c).textContent;
		const rows = [...document.querySelectorAll('#policy-rows tr')].map((tr) => ({
			Name: cell(tr, 'p-name'), Limit: cell(tr, 'p-limit'), InWindow: cell(tr, 'p-inwindow'),
			Remaining: cell(tr, 'p-remaining'), Refused: parseInt(cell(tr, 'p-refused'), 10),
			Most: parseInt(cell(tr, 'p-most'), 10), RefusedLast: tr.dataset.refused === '1',
		}));
		const lanes = [...document.querySelectorAll('#chart g.policy-lane')].map((g) => ({
			Policy: g.dataset.policy, OK: g.querySelectorAll('circle.m-ok').length,
			Here: g.querySelectorAll('path.m-no').length, Other: g.querySelectorAll('path.m-other').length,
			More: [...g.querySelectorAll('text.more')].reduce((n, t) => n + parseInt(t.textContent.slice(1), 10), 0),
		}));
		const feed = document.querySelector('#feed tr td.r-no, #feed tr td.r-ok');
		return {
			Rows: rows, Admitted: num('m-admitted'), Refused: num('m-refused'), Last: text('m-last'),
			HourlyRetry: document.querySelector('#policy-rows tr[data-policy="export-hourly"] .p-retry').textContent,
			Lanes: lanes, Feed: feed ? feed.textContent : '',
			Watch: document.getElementById('watch').value,
			Shown: text('feed') + ' ' + text('watch') + ' ' + text('chart'),
		};
	})()`, n))
}
