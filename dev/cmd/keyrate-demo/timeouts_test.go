package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeListener hands the server in-memory connections, so that the server
// runs inside a synctest bubble and its timeouts on the bubble's clock.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client's end of a new connection to the server.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// testTimeouts are short, distinct timeouts, so that a test can tell which
// one acted.
var testTimeouts = timeouts{ReadHeader: time.Second, Read: 2 * time.Second, Write: 3 * time.Second, Idle: 5 * time.Second}

// serveDemo runs the demo's server, API and page, with t's timeouts on a
// pipeListener, inside the calling synctest bubble; it stops with the test.
func serveDemo(t *testing.T, to timeouts) *pipeListener {
	t.Helper()
	hub, err := newLive(config{})
	if err != nil {
		t.Fatal(err)
	}
	api, closeLimiters, err := newServer(config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(withLive(api, hub), hub, to)
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		hub.Close()
		closeLimiters()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln
}

// get sends one keep-alive request on conn and reads the response head.
func getOn(t *testing.T, conn net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	// An API key identifies the client: a pipe has no IP address.
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: demo\r\nX-API-Key: pipe\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A keep-alive connection left idle is closed after the idle timeout, on
// the server's own initiative.
func TestIdleConnectionsAreClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := serveDemo(t, testTimeouts)
		conn := ln.dial()
		defer conn.Close()
		br := bufio.NewReader(conn)
		resp := getOn(t, conn, br, "/api/status")
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("GET /api/status: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		idle := time.Now()
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("idle connection: read %v, want EOF", err)
		}
		if waited := time.Since(idle); waited != testTimeouts.Idle {
			t.Fatalf("idle connection closed after %v, want the idle timeout, %v", waited, testTimeouts.Idle)
		}
	})
}

// The defaults bound every phase of a connection.
func TestDefaultTimeouts(t *testing.T) {
	hub, err := newLive(config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	srv := newHTTPServer(http.NotFoundHandler(), hub, timeouts{})
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout < srv.ReadHeaderTimeout || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("server timeouts: header %v, read %v, write %v, idle %v; want each set",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}

// The page's event stream lives past the server's read and write timeouts:
// its keep-alive ticks arrive every 10s on a server whose timeouts are all
// shorter.
func TestEventStreamOutlivesServerTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := serveDemo(t, testTimeouts)
		conn := ln.dial()
		defer conn.Close()
		br := bufio.NewReader(conn)
		resp := getOn(t, conn, br, "/live/events")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("GET /live/events: %d %v", resp.StatusCode, resp.Header)
		}
		start := time.Now()
		lines := bufio.NewScanner(resp.Body)
		var ticks []time.Duration
		for len(ticks) < 3 && lines.Scan() {
			if lines.Text() == "event: tick" {
				ticks = append(ticks, time.Since(start))
			}
		}
		want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
		if len(ticks) != 3 || ticks[0] != want[0] || ticks[1] != want[1] || ticks[2] != want[2] {
			t.Fatalf("ticks at %v (stream error %v), want %v", ticks, lines.Err(), want)
		}
		if strings.Contains(resp.Header.Get("Connection"), "close") {
			t.Fatalf("stream marked for closing: %v", resp.Header)
		}
	})
}
