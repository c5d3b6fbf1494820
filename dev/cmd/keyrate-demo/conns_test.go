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

// 32 addresses holding one of the page's event streams each fill the
// hub's 32, yet a 33rd address gets a stream: the oldest ends, and its
// page, reconnecting, gets one in turn.
func TestManyAddressesCannotFillTheEventStreams(t *testing.T) {
	otherLoopback(t)
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
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a stream of %s: %d, want 200", local, resp.StatusCode)
		}
		return resp
	}
	held := make([]*http.Response, 32)
	for i := range held {
		held[i] = stream(fmt.Sprintf("127.0.7.%d", i+1))
	}
	stream("127.0.8.1") // a newcomer
	// The oldest stream ends: its body reaches its end (hello and the
	// history first), where an open one would wait for the next event.
	if _, err := io.Copy(io.Discard, held[0].Body); err != nil {
		t.Fatalf("the oldest stream did not end cleanly for the newcomer: %v", err)
	}
	stream("127.0.7.1") // its page reconnects
	if _, err := io.Copy(io.Discard, held[1].Body); err != nil {
		t.Fatalf("the next oldest stream did not end for the reconnecting page: %v", err)
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
// address holding at least two fewer than the one holding the most takes
// the place of that address's least recently used, else of the one idle
// the longest, whoever holds it, never of one serving a request; with
// none idle it is closed. Closing a connection twice gives its place back
// once.
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
		a2c := push("192.0.2.1:1002")
		want(a2c, "accepted")
		a3c := push("192.0.2.1:1003")
		a3 := want(a3c, "accepted")
		want(push("[::ffff:192.0.2.1]:1004"), "closed")
		b1c := push("[2001:db8:1:2::1]:1001")
		b1 := want(b1c, "accepted")
		b2c := push("[2001:db8:1:2:ffff::2]:1001")
		b2 := want(b2c, "accepted") // the total of 5 is reached

		// A newcomer takes the place of 192.0.2.1's least recently used:
		// that address holds 3, two more than the newcomer would.
		d1 := want(push("198.51.100.1:1001"), "accepted")
		if !a1c.closed.Load() {
			t.Fatal("the newcomer took no one's place")
		}
		// Holding 1 against the most's 2, it takes the place of the one
		// idle the longest, a2; b1 serving a request is passed over.
		ln.connState(b1, http.StateActive)
		d2c := push("198.51.100.1:1002")
		d2 := want(d2c, "accepted")
		if !a2c.closed.Load() || b1c.closed.Load() {
			t.Fatalf("a2 closed %v, b1 closed %v: want a2, idle the longest, closed in the newcomer's place", a2c.closed.Load(), b1c.closed.Load())
		}
		// With every connection serving a request, a newcomer is closed
		// (its address holds 1, so none holds two more).
		for _, c := range []net.Conn{a3, b1, b2, d1, d2} {
			ln.connState(c, http.StateActive)
		}
		want(push("192.0.2.1:1006"), "closed")
		// One idle again: it gives way, though its request came after
		// the others'.
		ln.connState(b2, http.StateIdle)
		a4c := push("192.0.2.1:1007")
		want(a4c, "accepted")
		if !b2c.closed.Load() {
			t.Fatal("the idle connection did not give way")
		}
		a3.Close()
		synctest.Wait()
		e1c := push("203.0.113.1:1001")
		want(e1c, "accepted") // in a3's place
		a3.Close()            // again: nothing more to give back
		a1.Close()            // evicted: its place went to d1 already
		d1.Close()
		synctest.Wait()
		want(push("192.0.2.1:1008"), "accepted") // in d1's place
		for _, c := range []*fakeConn{b1c, d2c, a4c, e1c} {
			if c.closed.Load() {
				t.Fatalf("%v was closed while there was room", c.remote)
			}
		}
	})
}

// connEvents records the server's connection states, by client address
// (the client's local one), so that a test can wait until the server
// holds a connection idle: an observable event, not a guess of time.
type connEvents struct {
	mu    sync.Mutex
	cond  *sync.Cond
	state map[string]http.ConnState
}

func newConnEvents() *connEvents {
	e := &connEvents{state: make(map[string]http.ConnState)}
	e.cond = sync.NewCond(&e.mu)
	return e
}

func (e *connEvents) hook(c net.Conn, s http.ConnState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state[c.RemoteAddr().String()] = s
	e.cond.Broadcast()
}

// wait waits until the server's end of c is in state s.
func (e *connEvents) wait(t *testing.T, c net.Conn, s http.ConnState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a failsafe: the event comes within milliseconds
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.cond.Broadcast()
	})
	defer stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.state[c.LocalAddr().String()] != s {
		if ctx.Err() != nil {
			t.Fatalf("the server never held %v %v", c.LocalAddr(), s)
		}
		e.cond.Wait()
	}
}

// closedByServer reports whether the server has closed c: a read gets
// EOF or a reset at once, where an open idle connection would block until
// the deadline.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// 64 addresses holding one idle keep-alive connection each fill the 64
// the server holds (as 1,100 addresses fill its default 1,024), yet 8
// newcomers are each served: in the place of the connection idle the
// longest, whichever address holds it. Each client whose connection gave
// way is served again on a new one.
func TestManyAddressesCannotLockOutNewcomers(t *testing.T) {
	otherLoopback(t)
	events := newConnEvents()
	addr := startDemo(t, config{Conns: connLimits{Total: 64, PerAddr: 4}, onConnState: events.hook})
	held := make([]net.Conn, 64)
	for i := range held {
		held[i] = dialFrom(t, fmt.Sprintf("127.0.1.%d", i+1), addr)
		if !served(t, held[i]) {
			t.Fatalf("connection of 127.0.1.%d was closed, within the caps", i+1)
		}
		events.wait(t, held[i], http.StateIdle)
	}
	for i := range 8 {
		local := fmt.Sprintf("127.0.2.%d", i+1)
		c := dialFrom(t, local, addr)
		if !served(t, c) {
			t.Fatalf("newcomer %d of 8 (%s) was not served while 64 addresses held an idle connection each", i+1, local)
		}
		events.wait(t, c, http.StateIdle)
		if !closedByServer(t, held[i]) {
			t.Fatalf("newcomer %d: the connection idle the longest (127.0.1.%d's) is still open", i+1, i+1)
		}
	}
	if again := dialFrom(t, "127.0.1.1", addr); !served(t, again) {
		t.Fatal("the client whose idle connection gave way was not served on a new one")
	}
}

// Connections that never send a request count as idle: 16 addresses
// holding one each fill the server's 16, yet a newcomer is served, in the
// place of the one opened first.
func TestSilentConnectionsGiveWay(t *testing.T) {
	otherLoopback(t)
	events := newConnEvents()
	addr := startDemo(t, config{Conns: connLimits{Total: 16, PerAddr: 4}, onConnState: events.hook})
	silent := make([]net.Conn, 16)
	for i := range silent {
		silent[i] = dialFrom(t, fmt.Sprintf("127.0.3.%d", i+1), addr)
		events.wait(t, silent[i], http.StateNew)
	}
	if !served(t, dialFrom(t, "127.0.4.1", addr)) {
		t.Fatal("a newcomer was not served while 16 addresses held a silent connection each")
	}
	if !closedByServer(t, silent[0]) {
		t.Error("the silent connection opened first is still open")
	}
}

// A connection serving a request is not idle: with the page's event
// streams holding every connection, a newcomer holding as many as any
// address is closed, the streams are left alone, and a stream that ends
// leaves its place to the next newcomer.
func TestBusyConnectionsDoNotGiveWay(t *testing.T) {
	otherLoopback(t)
	events := newConnEvents()
	addr := startDemo(t, config{Conns: connLimits{Total: 4, PerAddr: 4}, onConnState: events.hook})
	streams := make([]net.Conn, 4)
	for i := range streams {
		c := dialFrom(t, fmt.Sprintf("127.0.5.%d", i+1), addr)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /live/events HTTP/1.1\r\nHost: demo\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %v %v", i+1, resp, err)
		}
		c.SetDeadline(time.Time{})
		streams[i] = c // the server's end was active before the handler ran
	}
	if served(t, dialFrom(t, "127.0.6.1", addr)) {
		t.Fatal("a newcomer took the place of an event stream")
	}
	streams[0].Close()
	events.wait(t, streams[0], http.StateClosed)
	if !served(t, dialFrom(t, "127.0.6.2", addr)) {
		t.Fatal("a newcomer was not served in the place of a stream that ended")
	}
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
