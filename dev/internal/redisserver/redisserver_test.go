package redisserver

import "testing"

// A started server answers PING; the test's end stops it.
func TestStart(t *testing.T) {
	addr := Start(t)
	if err := ping(addr); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
}
