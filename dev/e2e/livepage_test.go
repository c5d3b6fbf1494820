package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestLivePage builds the demo, starts it on a free loopback port and
// drives its page in headless Chromium: it opens on the route with the
// shortest window, a burst admits exactly the limit, and on the 10 s route a
// burst on each side of a fixed-window boundary shows the fixed window's
// excess while the sliding window still admits the limit once.
func TestLivePage(t *testing.T) {
	browser := findChromium(t)
	base := startDemo(t)
	status := demoRoute(t, base, "status")
	boundary := demoRoute(t, base, "burst")
	window := time.Duration(boundary.WindowMs) * time.Millisecond
	if window != 10*time.Second || boundary.Limit != 10 {
		t.Fatalf("route burst allows %d per %v, want the classic 10 per 10 s", boundary.Limit, window)
	}

	// The boundary burst may wait a whole window for the next boundary.
	ctx, console := openPage(t, browser, base+"/", 3*time.Minute+window, "live-page.png")
	if got := selection(t, ctx); got != (selected{boundary.Name, fmt.Sprint(boundary.Limit)}) {
		t.Errorf("the page opens on %+v, want route %q with a burst of its limit %d", got, boundary.Name, boundary.Limit)
	}

	// On the 60 s route, a burst of twice the limit on a fresh key: exactly
	// the limit admitted.
	selectRoute(t, ctx, status.Name)
	if got := selection(t, ctx); got != (selected{status.Name, fmt.Sprint(status.Limit)}) {
		t.Errorf("after choosing %q the page has %+v, want a burst size of its limit %d", status.Name, got, status.Limit)
	}
	limit := status.Limit
	burst := 2 * limit
	setInput(t, ctx, "key", "e2e-burst")
	setInput(t, ctx, "burst-size", fmt.Sprint(burst))
	click(t, ctx, "send-burst")
	got := waitForShown(t, ctx, burst, 60*time.Second)
	if got.SAdmitted != limit || got.SRefused != burst-limit || got.SMost != limit {
		t.Errorf("after a burst of %d: page shows %+v, want %d admitted, %d refused, most %d in a window",
			burst, got, limit, burst-limit, limit)
	}
	if want := fingerprint("e2e-burst"); got.Watch != want || got.SInWindow != fmt.Sprintf("%d / %d", limit, limit) || got.SRemaining != "0" {
		t.Errorf("after a burst: page shows %+v, want key %s, %d / %d in the window and 0 remaining", got, want, limit, limit)
	}

	// Back on the 10 s route, with the burst size it sets (its limit), on
	// another fresh key: 10 requests a second before a fixed-window boundary
	// and 10 a second after. The sliding window admits 10 and refuses 10;
	// the fixed window admits all 20 within two seconds, and the page says
	// so and marks the excess on the timeline.
	selectRoute(t, ctx, boundary.Name)
	if got := selection(t, ctx); got != (selected{boundary.Name, fmt.Sprint(boundary.Limit)}) {
		t.Errorf("after choosing %q the page has %+v, want a burst size of its limit %d", boundary.Name, got, boundary.Limit)
	}
	limit = boundary.Limit
	setInput(t, ctx, "key", "e2e-boundary")
	click(t, ctx, "send-boundary")
	got = waitForShown(t, ctx, 2*limit, window+90*time.Second)
	t.Logf("after the boundary burst the page shows %+v", got)
	if want := fingerprint("e2e-boundary"); got.Watch != want {
		t.Errorf("page shows key %q, want %s", got.Watch, want)
	}
	if want := fmt.Sprintf(": %d admitted (200), 0 refused (429). After it, ", limit); !strings.Contains(got.Status, want) ||
		!strings.HasSuffix(got.Status, fmt.Sprintf(": 0 admitted (200), %d refused (429).", limit)) {
		t.Errorf("page status %q, want %d responses of 200 before the boundary and %d of 429 after it", got.Status, limit, limit)
	}
	if got.SAdmitted != limit || got.SRefused != limit || got.SMost != limit {
		t.Errorf("sliding window: %d admitted, %d refused, most %d in a window; want %d, %d, %d",
			got.SAdmitted, got.SRefused, got.SMost, limit, limit, limit)
	}
	if !strings.HasPrefix(got.SVerdict, fmt.Sprintf("Never more than %d in any 10 s", limit)) {
		t.Errorf("sliding window verdict %q", got.SVerdict)
	}
	if got.FAdmitted != 2*limit || got.FRefused != 0 || got.FMost != 2*limit {
		t.Errorf("fixed window: %d admitted, %d refused, most %d in a window; want %d, 0, %d",
			got.FAdmitted, got.FRefused, got.FMost, 2*limit, 2*limit)
	}
	if want := fmt.Sprintf("%d over the limit of %d", limit, limit); !strings.Contains(got.FVerdict, want) {
		t.Errorf("fixed window verdict %q does not contain %q", got.FVerdict, want)
	}
	if got.ExcessMarked != 1 {
		t.Errorf("timeline marks %d excess spans in the fixed lane, want 1", got.ExcessMarked)
	}
	// Every request is drawn: in the sliding lane 10 admitted and 10
	// refused, in the fixed lane 20 admitted; a burst of the limit fits a
	// column, so nothing is folded into "+n".
	if got.Dots != 3*limit || got.Crosses != limit || got.More != 0 {
		t.Errorf("timeline draws %d admitted and %d refused marks and %d \"+n\" labels, want %d, %d and 0",
			got.Dots, got.Crosses, got.More, 3*limit, limit)
	}

	console.check(t)
}

// openPage starts headless Chromium (browser), opens url and waits until
// the page has loaded its routes and connected its stream. Everything ends
// with the test or after timeout; a screenshot named shot is kept (see
// saveScreenshot).
func openPage(t *testing.T, browser, url string, timeout time.Duration, shot string) (context.Context, *consoleLog) {
	t.Helper()
	ctx := startBrowser(t, browser, timeout)
	t.Cleanup(func() { saveScreenshot(t, ctx, shot) })

	console := collectConsole(ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	waitFor[bool](t, ctx, "the page to load its routes and connect its stream", 60*time.Second,
		`document.body.dataset.state === 'idle' && document.getElementById('conn').dataset.conn === 'live'`)
	return ctx, console
}

// startBrowser starts a browser for one page, ending by timeout, and
// returns its context. chromedp starts the browser at a context's first
// action, and again at the next one if that start failed, and then panics
// when both browsers exit (it closes one channel for each: chromedp#452).
// So the browser is started on its own first, and a start that fails is
// retried on a context of its own, up to three times, with each error
// logged.
func startBrowser(t *testing.T, browser string, timeout time.Duration) context.Context {
	t.Helper()
	for attempt := 1; ; attempt++ {
		// Not t.Context(), which ends before the cleanups that take the
		// screenshot and close the browser.
		ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
		ctx, cancelAlloc := chromedp.NewExecAllocator(ctx,
			chromedp.ExecPath(browser),
			chromedp.UserDataDir(t.TempDir()),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(1280, 1000),
		)
		ctx, cancelBrowser := chromedp.NewContext(ctx)
		stop := func() {
			cancelBrowser()
			cancelAlloc()
			cancelTimeout()
		}
		err := chromedp.Do(ctx)
		if err == nil {
			t.Cleanup(stop)
			return ctx
		}
		stop()
		if attempt == 3 {
			t.Fatalf("start the browser, attempt %d: %v", attempt, err)
		}
		t.Logf("start the browser, attempt %d: %v; trying again", attempt, err)
	}
}

// fingerprint is how the demo shows an API key, in its log and on its page,
// which never carry the key itself: the first 8 hex digits of its SHA-256.
func fingerprint(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "x-api-key=" + hex.EncodeToString(sum[:4])
}

// selected is the route the page has chosen and the burst size it offers.
type selected struct{ Route, BurstSize string }

func selection(t *testing.T, ctx context.Context) selected {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[selected](`({
		Route: document.getElementById('route').value,
		BurstSize: document.getElementById('burst-size').value,
	})`))
	if err != nil {
		t.Fatalf("read the selected route: %v", err)
	}
	return v
}

// selectRoute chooses a route in the page's list as a user would: the
// option is picked and the list reports the change.
func selectRoute(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const sel = document.getElementById('route');
		if (![...sel.options].some((o) => o.value === %q)) return false;
		sel.value = %q;
		sel.dispatchEvent(new Event('change', { bubbles: true }));
		return true;
	})()`, name, name)))
	if err != nil {
		t.Fatalf("choose route %q: %v", name, err)
	}
	if !ok {
		t.Fatalf("the page offers no route %q", name)
	}
}

// shown is what the page displays for the key it shows.
type shown struct {
	State, Status, Watch, SInWindow, SRemaining, SVerdict, FVerdict string
	SAdmitted, SRefused, SMost, FAdmitted, FRefused, FMost          int
	ExcessMarked                                                    int
	// Marks drawn on the timeline: admitted, refused, and "+n" labels
	// for columns too tall to draw in full.
	Dots, Crosses, More int
}

// waitForShown waits until the page is idle and shows n decisions for its
// key (the stream may deliver them a little after the responses), then
// returns what it shows.
func waitForShown(t *testing.T, ctx context.Context, n int, timeout time.Duration) shown {
	t.Helper()
	return waitFor[shown](t, ctx, fmt.Sprintf("the page to show %d decisions", n), timeout, fmt.Sprintf(`(() => {
		const text = (id) => document.getElementById(id).textContent;
		const num = (id) => parseInt(text(id), 10);
		if (document.body.dataset.state !== 'idle' || num('s-admitted') + num('s-refused') < %d) return false;
		return {
			State: document.body.dataset.state, Status: text('status'),
			Watch: document.getElementById('watch').value,
			SInWindow: text('s-inwindow'), SRemaining: text('s-remaining'),
			SVerdict: text('s-verdict'), FVerdict: text('f-verdict'),
			SAdmitted: num('s-admitted'), SRefused: num('s-refused'), SMost: num('s-most'),
			FAdmitted: num('f-admitted'), FRefused: num('f-refused'), FMost: num('f-most'),
			ExcessMarked: document.querySelectorAll('#chart rect.excess').length,
			Dots: document.querySelectorAll('#chart circle.m-ok').length,
			Crosses: document.querySelectorAll('#chart path.m-no').length,
			More: document.querySelectorAll('#chart text.more').length,
		};
	})()`, n))
}

func waitFor[T any](t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
		t.Fatalf("waiting for %s: %v (page status: %q)", what, err, status)
	}
	return v
}

func setInput(t *testing.T, ctx context.Context, id, value string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID(id), value)); err != nil {
		t.Fatalf("set #%s: %v", id, err)
	}
}

func click(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID(id))); err != nil {
		t.Fatalf("click #%s: %v", id, err)
	}
}

// consoleLog gathers the page's console messages as they come.
type consoleLog struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
	err  error // why the log stopped before the page's context ended
}

func collectConsole(ctx context.Context) *consoleLog {
	c := &consoleLog{}
	msgs := chromedp.Console(ctx) // subscribes now, before the page opens
	go func() {
		for m, err := range msgs {
			c.mu.Lock()
			if err != nil {
				if ctx.Err() == nil {
					c.err = err
				}
				c.mu.Unlock()
				return
			}
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
	return c
}

// all returns what the page logged so far, or the error that stopped the
// log.
func (c *consoleLog) all() ([]chromedp.ConsoleMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chromedp.ConsoleMessage(nil), c.msgs...), c.err
}

// check fails the test for anything the page logged but the browser's note
// for each 429 it received, which are the refusals it asked for, and for
// each response of a status in also, which the test asked for too.
func (c *consoleLog) check(t *testing.T, also ...int) {
	t.Helper()
	expected := func(text string) bool {
		for _, code := range append([]int{429}, also...) {
			if strings.Contains(text, fmt.Sprintf("status of %d", code)) {
				return true
			}
		}
		return false
	}
	refusals := 0
	msgs, err := c.all()
	if err != nil {
		t.Errorf("the page's console was not read to the end: %v", err)
	}
	for _, m := range msgs {
		switch {
		case m.Source == "network" && expected(m.Text):
			refusals++
		case m.Type == chromedp.ConsoleError || m.IsException():
			t.Errorf("console %s", m)
		default:
			t.Logf("console %s", m)
		}
	}
	t.Logf("console: %d notes of a response of status 429 or %v, nothing else of level error", refusals, also)
}

// saveScreenshot keeps a picture of the page, pass or fail, in
// $KEYRATE_ARTIFACTS when set.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("KEYRATE_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("artifacts directory: %v", err)
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// findChromium returns the browser to drive, or skips the test with an
// install hint; under KEYRATE_INTEGRATION=1 a missing browser fails it.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const hint = "chromium not found; install it with: apt-get install -y chromium"
	if os.Getenv("KEYRATE_INTEGRATION") == "1" {
		t.Fatal(hint + " (required: KEYRATE_INTEGRATION=1)")
	}
	t.Skip(hint)
	return ""
}

// route is a route as the page's configuration describes it.
type route struct {
	Name     string   `json:"name"`
	Policies []policy `json:"policies"`
	// Limit and WindowMs are those of a route's only policy.
	Limit    int     `json:"-"`
	WindowMs float64 `json:"-"`
}

type policy struct {
	Name     string  `json:"name"`
	Limit    int     `json:"limit"`
	WindowMs float64 `json:"windowMs"`
}

// demoRoute reads a route's budget from the page's own configuration, so
// the test follows the demo's settings.
func demoRoute(t *testing.T, base, name string) route {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/live/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct{ Routes []route }
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatalf("/live/config: %v", err)
	}
	for _, r := range cfg.Routes {
		if r.Name != name || len(r.Policies) == 0 {
			continue
		}
		usable := true
		for _, p := range r.Policies {
			usable = usable && p.Limit > 0 && p.WindowMs >= 1000
		}
		if usable {
			r.Limit, r.WindowMs = r.Policies[0].Limit, r.Policies[0].WindowMs
			return r
		}
	}
	t.Fatalf("/live/config has no usable route %q: %+v", name, cfg.Routes)
	return route{}
}
