package adapter

import (
	"testing"
	"time"
)

// TestAppendReset: a reset is written as time.Duration writes it once
// rounded up to the millisecond, the form of OpenAI's
// x-ratelimit-reset-requests (1s, 6m0s, 12ms).
func TestAppendReset(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 1: "1ms", 12 * time.Millisecond: "12ms", time.Second: "1s",
		6 * time.Minute: "6m0s", 1500 * time.Millisecond: "1.5s", 59999*time.Millisecond + 1: "1m0s",
		time.Hour + 2*time.Minute + 3040*time.Millisecond: "1h2m3.04s", 24 * time.Hour: "24h0m0s",
	} {
		if got := string(AppendReset(nil, d)); got != want {
			t.Errorf("AppendReset(%v) = %q, want %q", d, got, want)
		}
	}
	for ms := time.Duration(0); ms < 4_000_000; ms += 997 {
		d := ms * time.Millisecond
		if got, want := string(AppendReset(nil, d)), d.String(); got != want {
			t.Fatalf("AppendReset(%v) = %q, want %q", d, got, want)
		}
	}
}
