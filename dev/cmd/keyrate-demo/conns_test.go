package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// startDemo runs the demo with cfg on a free port of 127.0.0.1 until the
// test ends, and returns its host:port.
func startDemo(t *testing.T, cfg config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, "127.0.0.1:0", cfg, w)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	lines := bufio.NewScanner(r)
	if !lines.Scan() {
		t.Fatal("no output")
	}
	base, ok := strings.CutPrefix(lines.Text(), "keyrate-demo listening on http://")
	if !ok {
		t.Fatalf("first line %q", lines.Text())
	}
	go io.Copy(io.Discard, r)
	return base
}

// otherLoopback is a second client address on this host: 127.0.0.2, which
// Linux routes to the loopback interface. The test is skipped where it
// cannot be used (macOS has only 127.0.0.1 unless an alias is added).
func otherLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 is not usable as a second client address here: %v", err)
	}
	ln.Close()
	return "127.0.0.2"
}

// dialFrom opens a connection to addr from the address local.
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// served sends one keep-alive request on c and reports whether it was
// answered (200), or the server closed the connection instead. The
// connection is left idle, open on the client's side.
func served(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /live/config HTTP/1.1\r\nHost: demo\r\n\r\n"); err != nil {
		return false // closed before the request went out
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("no answer and no close within 10s: %v", err)
	case err != nil:
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /live/config: %d", resp.StatusCode)
	}
	return true
}

// One address holding 300 idle keep-alive connections gets 50 of them
// served, the cap per address, and the rest closed at once; another
// address is served meanwhile, though the 50 take a quarter of the total.
func TestOneAddressCannotTakeEveryConnection(t *testing.T) {
	other := otherLoopback(t)
	addr := startDemo(t, config{Conns: connLimits{Total: 200, PerAddr: 50}})
	var held int
	for i := range 300 {
		if served(t, dialFrom(t, "127.0.0.1", addr)) {
			held++
		} else if i < 50 {
			t.Fatalf("connection %d of 127.0.0.1 was closed, under the cap of 50", i+1)
		}
	}
	if held != 50 {
		t.Fatalf("127.0.0.1 holds %d served connections, want 50 (the cap per address)", held)
	}
	if !served(t, dialFrom(t, other, addr)) {
		t.Fatalf("%s was not served while 127.0.0.1 held its 50 connections", other)
	}
}

// One address may hold 4 of the page's event streams: its 5th gets 503,
// while another address still gets one.
func TestEventStreamsPerAddress(t *testing.T) {
	other := otherLoopback(t)
	addr := startDemo(t, config{})
	stream := func(local string) *http.Response {
		t.Helper()
		tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/live/events", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() }) // open until the test ends
		return resp
	}
	for i := range 4 {
		if resp := stream("127.0.0.1"); resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d of 127.0.0.1: %d", i+1, resp.StatusCode)
		}
	}
	if resp := stream("127.0.0.1"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("5th stream of 127.0.0.1: %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	if resp := stream(other); resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("a stream of %s while 127.0.0.1 holds 4: %d %v", other, resp.StatusCode, resp.Header)
	}
}

// fakeListener hands out the connections pushed to it, in order.
type fakeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *fakeListener) Addr() net.Addr { return pipeAddr{} }

// fakeConn is a connection from remote that records whether it was closed.
type fakeConn struct {
	net.Conn // nil: only RemoteAddr and Close are called
	remote   net.Addr
	closed   atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

// The caps, traced on connections from chosen addresses: an address's
// connections over PerAddr are closed at once (an IPv6 address counts by
// its /64, an IPv4-mapped one as IPv4); at Total, a connection from an
// address holding fewer than the one holding the most takes the place of
// that address's least recently used, else it is closed; closing a
// connection twice gives its place back once.
func TestConnLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fl := &fakeListener{conns: make(chan net.Conn, 100), done: make(chan struct{})}
		ln := limitConns(fl, connLimits{Total: 5, PerAddr: 3})
		accepted := make(chan net.Conn, 100)
		defer func() {
			ln.Close()
			for range accepted {
			}
		}()
		go func() {
			defer close(accepted)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		push := func(addr string) *fakeConn {
			time.Sleep(time.Millisecond) // each connection used at its own instant
			c := &fakeConn{remote: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}
			fl.conns <- c
			synctest.Wait()
			return c
		}
		// want checks that the last connection pushed was accepted (and
		// returns it) or closed at once.
		want := func(c *fakeConn, state string) net.Conn {
			t.Helper()
			var got net.Conn
			select {
			case got = <-accepted:
			default:
			}
			now := map[bool]string{true: "accepted", false: "neither"}[got != nil]
			if c.closed.Load() {
				now = "closed"
			}
			if now != state {
				t.Fatalf("connection from %v: %s, want %s", c.remote, now, state)
			}
			return got
		}
		a1c := push("192.0.2.1:1001")
		a1 := want(a1c, "accepted")
		want(push("192.0.2.1:1002"), "accepted")
		a3 := want(push("192.0.2.1:1003"), "accepted")
		want(push("[::ffff:192.0.2.1]:1004"), "closed")
		want(push("[2001:db8:1:2::1]:1001"), "accepted")
		want(push("[2001:db8:1:2:ffff::2]:1001"), "accepted") // the total of 5 is reached

		// A newcomer takes the place of 192.0.2.1's least recently used.
		d1 := want(push("198.51.100.1:1001"), "accepted")
		if !a1c.closed.Load() {
			t.Fatal("the newcomer took no one's place")
		}
		// Holding 1 against the most's 2, it gets no more.
		want(push("198.51.100.1:1002"), "closed")
		a3.Close()
		synctest.Wait()
		want(push("198.51.100.1:1003"), "accepted") // in a3's place
		a3.Close()                                  // again: nothing more to give back
		a1.Close()                                  // evicted: its place went to d1 already
		d1.Close()
		synctest.Wait()
		want(push("192.0.2.1:1005"), "accepted")
		want(push("192.0.2.1:1006"), "closed") // full, and 192.0.2.1 holds as many as anyone
	})
}

// 8 addresses holding 128 keep-alive connections each fill the 1,024 the
// server holds, yet a 9th address is served: in the place of one of them.
func TestAddressesTogetherCannotTakeEveryConnection(t *testing.T) {
	otherLoopback(t)
	addr := startDemo(t, config{Conns: connLimits{Total: 1024, PerAddr: 128}})
	for a := range 8 {
		local := fmt.Sprintf("127.0.0.%d", 10+a)
		for i := range 128 {
			if !served(t, dialFrom(t, local, addr)) {
				t.Fatalf("connection %d of %s was closed, within the caps", i+1, local)
			}
		}
	}
	if !served(t, dialFrom(t, "127.0.0.100", addr)) {
		t.Fatal("127.0.0.100 was not served while 8 addresses held every connection")
	}
}

func TestClientAddr(t *testing.T) {
	for in, want := range map[net.Addr]string{
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:80")):           "192.0.2.1",
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[::ffff:192.0.2.1]:80")):  "192.0.2.1",
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[2001:db8:1:2:3::4]:80")): "2001:db8:1:2::/64",
		net.TCPAddrFromAddrPort(netip.MustParseAddrPort("[fe80::1%eth0]:80")):      "fe80::/64",
		pipeAddr{}: "pipe",
	} {
		if got := clientAddr(in); got != want {
			t.Errorf("clientAddr(%v) = %q, want %q", in, got, want)
		}
	}
}
