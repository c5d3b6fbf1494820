package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLivePageLogin drives the page on /api/login, which counts failed
// attempts only (5 per 15 minutes), with the form it shows: three logins
// with the right password are given back and count for nothing, then six
// with a wrong one get five 401s and a 429. The page draws the given-back
// attempts apart, in the sliding lane and in the fixed one simulated
// beside it, and counts only the failures in the window.
func TestLivePageLogin(t *testing.T) {
	browser := findChromium(t)
	base := startDemo(t)
	login := demoRoute(t, base, "login")
	if login.Limit != 5 || login.WindowMs != 900_000 {
		t.Fatalf("route login allows %d per %v ms, want 5 per 15 minutes", login.Limit, login.WindowMs)
	}
	password := demoPassword(t, base)

	ctx, console := openPage(t, browser, base+"/?route=login", 2*time.Minute, "live-page-login.png")
	if got := selection(t, ctx); got != (selected{"login", "5"}) {
		t.Errorf("the page opens on %+v, want route login with a burst of its limit, 5", got)
	}
	setInput(t, ctx, "key", "e2e-login")

	setInput(t, ctx, "form-password", password)
	setInput(t, ctx, "burst-size", "3")
	click(t, ctx, "send-burst")
	got := waitForLogin(t, ctx, 3, 0, 0)
	if got.Status != "Burst of 3: 3 admitted (200), 0 refused (429)." || got.InWindow != "0 / 5" {
		t.Errorf("after 3 right logins the page shows %+v, want 3 admitted and none in the window", got)
	}

	setInput(t, ctx, "form-password", "not-"+password)
	setInput(t, ctx, "burst-size", "6")
	click(t, ctx, "send-burst")
	got = waitForLogin(t, ctx, 3, 5, 1)
	if got.Status != "Burst of 6: 0 admitted (200), 1 refused (429), 5 answered 401." || got.InWindow != "5 / 5" || got.Remaining != "0" {
		t.Errorf("after 6 wrong logins the page shows %+v, want 5 failures in the window, none remaining, and one 429", got)
	}
	// Each lane draws the 3 given back as such; the sliding one the 5
	// failures it counted and the refusal, the fixed one the same.
	if got.Back != 6 || got.Dots != 10 || got.Crosses != 2 {
		t.Errorf("timeline: %d given back, %d admitted, %d refused marks; want 6, 10 and 2", got.Back, got.Dots, got.Crosses)
	}
	if !strings.Contains(got.Feed, "given back") {
		t.Errorf("the feed does not show a login given back: %q", got.Feed)
	}
	console.check(t, http.StatusUnauthorized)
}

// loginShown is what the page shows on the login route for its key.
type loginShown struct {
	Status, InWindow, Remaining, Feed string
	Admitted, Refused, Refunded       int
	Dots, Crosses, Back               int
}

// waitForLogin waits until the page is idle and counts the given numbers of
// attempts admitted (and counted), refused and given back.
func waitForLogin(t *testing.T, ctx context.Context, refunded, admitted, refused int) loginShown {
	t.Helper()
	return waitFor[loginShown](t, ctx, fmt.Sprintf("the page to show %d given back, %d admitted, %d refused", refunded, admitted, refused), 30*time.Second, fmt.Sprintf(`(() => {
		const text = (id) => document.getElementById(id).textContent;
		const num = (id) => parseInt(text(id), 10);
		if (document.body.dataset.state !== 'idle' || num('s-refunded') !== %d || num('s-admitted') !== %d || num('s-refused') !== %d) return false;
		return {
			Status: text('status'), InWindow: text('s-inwindow'), Remaining: text('s-remaining'), Feed: text('feed'),
			Admitted: num('s-admitted'), Refused: num('s-refused'), Refunded: num('s-refunded'),
			Dots: document.querySelectorAll('#chart circle.m-ok').length,
			Crosses: document.querySelectorAll('#chart path.m-no').length,
			Back: document.querySelectorAll('#chart circle.m-back').length,
		};
	})()`, refunded, admitted, refused))
}

// demoPassword reads the password that succeeds from the note the page
// shows for the login route, so the test follows the demo's settings.
func demoPassword(t *testing.T, base string) string {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(base + "/live/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct{ Routes []struct{ Name, Note string } }
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatalf("/live/config: %v", err)
	}
	for _, r := range cfg.Routes {
		if m := regexp.MustCompile(`password "([^"]+)" succeeds`).FindStringSubmatch(r.Note); r.Name == "login" && m != nil {
			return m[1]
		}
	}
	t.Fatalf("/live/config names no password for login: %+v", cfg.Routes)
	return ""
}
