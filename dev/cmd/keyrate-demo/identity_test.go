package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fingerprints below are the first 8 hex digits of the values' SHA-256,
// as `printf secret-123 | sha256sum | cut -c1-8` prints them.
const secretFingerprint = "x-api-key=30010959"

func TestShownIdentity(t *testing.T) {
	long := strings.Repeat("k", 200)
	cases := []struct{ identity, want string }{
		{"x-api-key=secret-123", secretFingerprint},
		{"x-api-key=alice", "x-api-key=2bd806c9"},
		{"x-api-key=", "x-api-key=e3b0c442"},
		{"203.0.113.7", "203.0.113.7"},
		{"2001:db8::/64", "2001:db8::/64"},
		{"sha256:abc", "sha256:abc"},
	}
	for _, c := range cases {
		if got := shownIdentity(c.identity); got != c.want {
			t.Errorf("shownIdentity(%q) = %q, want %q", c.identity, got, c.want)
		}
	}
	if got := shownKey("secret-123"); got != secretFingerprint {
		t.Errorf("shownKey(secret-123) = %q, want %q", got, secretFingerprint)
	}
	// A key too long to keep is limited under a digest, and shown as that.
	if got := shownKey(long); !strings.HasPrefix(got, "sha256:") || strings.Contains(got, long[:16]) {
		t.Errorf("shownKey(200 bytes) = %q, want the bounded digest", got)
	}
}

// lockedBuffer collects the demo's log, written from request goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// An API key reaches neither the log nor the page's event stream, which
// every browser on the page receives: both show its fingerprint, and the
// page learns the fingerprint of its own key from /live/key.
func TestNoRawKeyInLogOrStream(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	log := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "127.0.0.1:0", config{}, w)
		w.Close()
	}()
	lines := bufio.NewScanner(r)
	if !lines.Scan() {
		t.Fatal("no output")
	}
	base, ok := strings.CutPrefix(lines.Text(), "keyrate-demo listening on ")
	if !ok {
		t.Fatalf("first line %q", lines.Text())
	}
	copied := make(chan struct{})
	go func() { io.Copy(log, r); close(copied) }()

	client := &http.Client{Timeout: 30 * time.Second}
	streamCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	req, _ := http.NewRequestWithContext(streamCtx, "GET", base+"/live/events", nil)
	stream, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()

	for range 4 { // 3 admitted, then a refusal
		req, _ := http.NewRequest("GET", base+"/api/status", nil)
		req.Header.Set(keyHeader, "secret-123")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	var events []string
	frames := bufio.NewScanner(stream.Body)
	for len(events) < 4 && frames.Scan() {
		if data, ok := strings.CutPrefix(frames.Text(), "data: "); ok && strings.Contains(data, `"route"`) {
			events = append(events, data)
		}
	}
	all := strings.Join(events, "\n")
	if len(events) != 4 || strings.Count(all, `"key":"`+secretFingerprint+`"`) != 4 {
		t.Errorf("stream carried %d decisions, want 4 keyed %s:\n%s", len(events), secretFingerprint, all)
	}
	if strings.Contains(all, "secret-123") {
		t.Errorf("the event stream carries the raw key:\n%s", all)
	}

	req, _ = http.NewRequest("GET", base+"/live/key", nil)
	req.Header.Set(keyHeader, "secret-123")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var own struct{ Key string }
	json.NewDecoder(resp.Body).Decode(&own)
	resp.Body.Close()
	if own.Key != secretFingerprint {
		t.Errorf("/live/key says %q, want %q, the key the page's decisions come with", own.Key, secretFingerprint)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-copied
	out := log.String()
	if strings.Count(out, secretFingerprint) != 4 || !strings.Contains(out, "refused") {
		t.Errorf("log does not show the 4 decisions by fingerprint:\n%s", out)
	}
	if strings.Contains(out, "secret-123") {
		t.Errorf("the log carries the raw key:\n%s", out)
	}
}
