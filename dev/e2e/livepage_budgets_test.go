package e2e

import (
	"context"
	"fmt"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"slices"
	"testing"
	"time"
)

// TestLivePageBudgets drives the page on /api/generate, a model API's
// budgets: 20 requests and 10,000 tokens a minute, decided together, and 4
// requests in flight. After one request of 2,000 that used 500 the page
// draws each budget, the tokens as the settle left them; a burst of 19
// spends the requests, and one more is refused by them, drawn as the
// refusing budget, with no tokens spent.
func TestLivePageBudgets(t *testing.T) {
	browser := findChromium(t)
	base := startDemo(t)
	ctx, console := openPage(t, browser, base+"/?route=generate", 2*time.Minute, "live-page-budgets.png")
	setInput(t, ctx, "key", "e2e-budgets")
	setInput(t, ctx, "form-max_tokens", "2000")
	setInput(t, ctx, "form-used", "500")
	click(t, ctx, "send-one")
	rows := waitForBudgets(t, ctx, 1)
	// The calendar quotas: a day and the month turning on the 15th (UTC).
	day, month := quotaRows(time.Now())
	if want := []string{
		"requests per 1 min|20|1|19||",
		"tokens per 1 min|10,000|500|9,500||",
		"tokens-day per " + day + "|200,000|500|199,500||",
		"tokens-month per " + month + "|2,000,000|500|1,999,500||",
		"in flight at once|4|1|3|–|",
	}; !slices.Equal(rows, want) {
		t.Errorf("after one request of 2,000 that used 500, the budgets read\n%q\nwant\n%q", rows, want)
	}

	setInput(t, ctx, "form-max_tokens", "100")
	setInput(t, ctx, "form-used", "100")
	setInput(t, ctx, "burst-size", "19")
	click(t, ctx, "send-burst")
	waitForBudgets(t, ctx, 20)
	click(t, ctx, "send-one")
	rows = waitForBudgets(t, ctx, 21)
	if want := []string{
		"requests per 1 min|20|20|0||refusing",
		"tokens per 1 min|10,000|2,400|7,600||",
		"tokens-day per " + day + "|200,000|2,400|197,600||",
		"tokens-month per " + month + "|2,000,000|2,400|1,997,600||",
		"in flight at once|4|1|3|–|",
	}; !slices.Equal(rows, want) {
		t.Errorf("after the 21st request in a minute, the budgets read\n%q\nwant\n%q", rows, want)
	}
	console.check(t)
}

// quotaRows returns how the page names the demo's day and month at now:
// "1 d", and the month from the 15th's length, "30 d".
func quotaRows(now time.Time) (day, month string) {
	start, end := backend.Period(keyrate.Monthly(15, time.UTC), now)
	return "1 d", fmt.Sprintf("%d d", end.Sub(start)/(24*time.Hour))
}

// waitForBudgets waits until the page is idle and has counted n decisions
// for its key, then returns its budget rows: name, limit, used, remaining,
// "" or – for when the window empties (a countdown, left out), and
// "refusing" for the budget that refused the last request.
func waitForBudgets(t *testing.T, ctx context.Context, n int) []string {
	t.Helper()
	return waitFor[[]string](t, ctx, fmt.Sprintf("the page to draw the budgets after %d decisions", n), 30*time.Second, fmt.Sprintf(`(() => {
		const num = (id) => parseInt(document.getElementById(id).textContent, 10);
		if (document.body.dataset.state !== 'idle' || num('s-admitted') + num('s-refused') !== %d || document.getElementById('budgets').hidden) return false;
		return [...document.querySelectorAll('#budget-rows tr')].map((tr) => {
			const c = (k) => tr.querySelector('.' + k).textContent;
			const reset = c('b-reset') === '–' ? '–' : '';
			return [c('b-name'), c('b-limit'), c('b-used'), c('b-remaining'), reset, tr.classList.contains('refusing') ? 'refusing' : ''].join('|');
		});
	})()`, n))
}
