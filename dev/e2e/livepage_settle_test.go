package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLivePageSettle drives the page on /api/generate, 10,000 tokens a
// minute, whose requests reserve their max_tokens and keep what they used,
// with the form the page shows. A request of 2,000 that used 500 is drawn
// as a bar of 500 counted and 1,500 given back, in the sliding lane and in
// the fixed one simulated beside it, and the page reads the settle off the
// stream: the window holds 500, the request counts as admitted and settled
// in part, not given back. One that used nothing is given back whole, one
// of 20,000 can never fit (413), and a burst of 4 more fits and keeps a
// quarter of what it reserved. A page opened afterwards shows the same.
func TestLivePageSettle(t *testing.T) {
	browser := findChromium(t)
	base := startDemo(t)
	gen := demoRoute(t, base, "generate")
	if gen.Limit != 10_000 || gen.WindowMs != 60_000 {
		t.Fatalf("route generate allows %d per %v ms, want 10,000 tokens a minute", gen.Limit, gen.WindowMs)
	}

	ctx, console := openPage(t, browser, base+"/?route=generate", 2*time.Minute, "live-page-settle.png")
	if got := selection(t, ctx); got != (selected{"generate", "5"}) {
		t.Errorf("the page opens on %+v, want route generate with the burst it offers, 5", got)
	}
	setInput(t, ctx, "key", "e2e-generate")
	setInput(t, ctx, "form-max_tokens", "2000")
	setInput(t, ctx, "form-used", "500")
	click(t, ctx, "send-one")
	got := waitForSettle(t, ctx, settleCounts{Admitted: 1, Settled: 1})
	got.check(t, "after one request of 2,000 that used 500", settleShown{
		Status: "One request: 1 admitted (200), 0 refused (429).", InWindow: "500 / 10,000", Remaining: "9,500",
		Reserved: "2,000", Given: "1,500", Cost: "500", Most: "2,000",
		Settle:      "reserved 2,000 tokens, gave back 1,500, cost 500; server said Remaining 9,500.",
		SlidingHeld: []int{500}, SlidingBack: []int{1500}, FixedHeld: []int{500}, FixedBack: []int{1500},
	})
	for _, row := range []string{"● admitted, 2,000 tokens reserved", "◐ settled: 1,500 of 2,000 tokens given back, 500 kept"} {
		if !strings.Contains(got.Feed, row) {
			t.Errorf("the feed lacks %q: %q", row, got.Feed)
		}
	}

	setInput(t, ctx, "form-used", "0")
	click(t, ctx, "send-one")
	got = waitForSettle(t, ctx, settleCounts{Admitted: 1, Settled: 1, Refunded: 1})
	got.check(t, "after another that used nothing", settleShown{
		Status: "One request: 1 admitted (200), 0 refused (429).", InWindow: "500 / 10,000", Remaining: "9,500",
		Reserved: "4,000", Given: "3,500", Cost: "500", Most: "2,500",
		Settle:      "reserved 2,000 tokens, gave back all of them, cost 0; server said Remaining 9,500.",
		SlidingHeld: []int{500}, SlidingBack: []int{1500, 2000}, FixedHeld: []int{500}, FixedBack: []int{1500, 2000},
	})
	if row := "○ given back: all 2,000 tokens it held"; !strings.Contains(got.Feed, row) {
		t.Errorf("the feed lacks %q: %q", row, got.Feed)
	}

	setInput(t, ctx, "form-max_tokens", "20000")
	click(t, ctx, "send-one")
	got = waitForSettle(t, ctx, settleCounts{Admitted: 1, Settled: 1, Refunded: 1, Refused: 1})
	if got.Status != "One request: 0 admitted (200), 0 refused (429), 1 answered 413." || got.Crosses != 2 || got.InWindow != "500 / 10,000" {
		t.Errorf("after a request of 20,000: %+v, want a 413 drawn refused in both lanes, and the window as it was", got)
	}
	if row := "✕ 413 can never fit, 20,000 tokens"; !strings.Contains(got.Feed, row) {
		t.Errorf("the feed lacks %q: %q", row, got.Feed)
	}

	// Four more of 2,000 fit beside the 500 held, however their settles
	// interleave with their decisions; each keeps 500.
	setInput(t, ctx, "form-max_tokens", "2000")
	setInput(t, ctx, "form-used", "500")
	setInput(t, ctx, "burst-size", "4")
	click(t, ctx, "send-burst")
	got = waitForSettle(t, ctx, settleCounts{Admitted: 5, Settled: 5, Refunded: 1, Refused: 1})
	got.check(t, "after a burst of 4 more", settleShown{
		Status: "Burst of 4: 4 admitted (200), 0 refused (429).", InWindow: "2,500 / 10,000", Remaining: "7,500",
		Reserved: "12,000", Given: "9,500", Cost: "2,500", Most: got.Most,
		Settle:      "reserved 2,000 tokens, gave back 1,500, cost 500; server said Remaining " + got.SettleRemaining + ".",
		SlidingHeld: slices.Repeat([]int{500}, 5), SlidingBack: []int{1500, 1500, 1500, 1500, 1500, 2000},
		FixedHeld: slices.Repeat([]int{500}, 5), FixedBack: []int{1500, 1500, 1500, 1500, 1500, 2000},
	})
	// The window held at most the reservations of the burst beside the
	// 500 kept; never more than the limit.
	if most, err := strconv.Atoi(strings.ReplaceAll(got.Most, ",", "")); err != nil || most < 2500 || most > 8500 {
		t.Errorf("the most in any window reads %q, want 2,500 to 8,500", got.Most)
	}
	if got.Watch != fingerprint("e2e-generate") {
		t.Errorf("the page shows key %q, want the one it sent", got.Watch)
	}
	console.check(t, http.StatusRequestEntityTooLarge)

	// A page opened now replays the decisions and their settles from the
	// server's history, and counts the same.
	later, laterConsole := openPage(t, browser, base+"/?route=generate", 2*time.Minute, "live-page-settle-later.png")
	again := waitForSettle(t, later, settleCounts{Admitted: 5, Settled: 5, Refunded: 1, Refused: 1})
	again.Status, again.Feed, again.Most, again.Settle, again.SettleRemaining = got.Status, got.Feed, got.Most, got.Settle, got.SettleRemaining
	again.check(t, "on a page opened later", got)
	laterConsole.check(t)
}

// settleCounts are the requests the page counts on the generate route for
// its key: admitted (settled in part among them), given back whole, refused.
type settleCounts struct{ Admitted, Settled, Refunded, Refused int }

// settleShown is what the page shows on the generate route for its key.
type settleShown struct {
	Status, Watch, Label, InWindow, Remaining, Reserved, Given, Cost, Most, Settle, Feed string
	// SettleRemaining is what the last settle says the server had left.
	SettleRemaining string
	// The bars of each lane: the weight counted, and the weight given back.
	SlidingHeld, SlidingBack, FixedHeld, FixedBack []int
	// Crosses are the refusals drawn, More the "+n" labels of marks
	// left out, none here: every mark is drawn.
	Crosses, More int
}

func (got settleShown) check(t *testing.T, when string, want settleShown) {
	t.Helper()
	want.Watch, want.Feed, want.SettleRemaining, want.Crosses = got.Watch, got.Feed, got.SettleRemaining, got.Crosses
	if want.Label == "" {
		want.Label = "In window now (tokens)"
	}
	for _, bars := range [][]int{got.SlidingHeld, got.SlidingBack, got.FixedHeld, got.FixedBack} {
		slices.Sort(bars)
	}
	if !strings.HasSuffix(got.Settle, want.Settle) {
		t.Errorf("%s: the last settle reads %q, want it to end %q", when, got.Settle, want.Settle)
	}
	want.Settle = got.Settle
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: the page shows\n%+v\nwant\n%+v", when, got, want)
	}
}

// waitForSettle waits until the page is idle and counts c for its key, then
// returns what it shows.
func waitForSettle(t *testing.T, ctx context.Context, c settleCounts) settleShown {
	t.Helper()
	return waitFor[settleShown](t, ctx, fmt.Sprintf("the page to count %+v", c), 30*time.Second, fmt.Sprintf(`(() => {
		const text = (id) => document.getElementById(id).textContent;
		const num = (id) => parseInt(text(id), 10);
		if (document.body.dataset.state !== 'idle' || document.body.dataset.settles !== '1' ||
			num('s-admitted') !== %d || num('s-settled') !== %d || num('s-refunded') !== %d || num('s-refused') !== %d) return false;
		const weights = (lane, kind) => [...document.querySelectorAll('#chart g[data-lane="' + lane + '"] rect.b-' + kind)].map((e) => +e.dataset.weight);
		const settle = text('s-settle');
		const left = /Remaining ([0-9,]+)\.$/.exec(settle);
		return {
			Status: text('status'), Watch: document.getElementById('watch').value,
			Label: text('s-inwindow-label'), InWindow: text('s-inwindow'), Remaining: text('s-remaining'),
			Reserved: text('s-reserved'), Given: text('s-given'), Cost: text('s-cost'), Most: text('s-most'),
			Settle: settle, Feed: text('feed'), SettleRemaining: left ? left[1] : '',
			SlidingHeld: weights('sliding', 'ok'), SlidingBack: weights('sliding', 'back'),
			FixedHeld: weights('fixed', 'ok'), FixedBack: weights('fixed', 'back'),
			Crosses: document.querySelectorAll('#chart path.m-no').length,
			More: document.querySelectorAll('#chart text.more').length,
		};
	})()`, c.Admitted, c.Settled, c.Refunded, c.Refused))
}
