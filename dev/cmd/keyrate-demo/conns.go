package main

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connLimits bound the connections the server holds open. Each costs a
// file descriptor, a goroutine and buffers (about 21 KB when idle after a
// request): 20,000 idle keep-alive connections from one address took an
// unbounded demo to 812 MB and out of file descriptors, after which it
// accepted no one.
type connLimits struct {
	// Total bounds the connections open at once. Once it is reached, a
	// new connection takes the place of another, which is closed: the
	// least recently used of the address holding the most, when that
	// address holds at least two more than the newcomer's; else the one
	// idle the longest, whoever holds it. Idle is waiting for a request,
	// the first (within ReadHeaderTimeout) or the next on a keep-alive
	// connection (within IdleTimeout); a connection serving a request
	// (the page's event streams included) is not idle. With none idle,
	// the newcomer is closed at once: every connection is then serving a
	// request, which the server's timeouts bound, and the page's streams
	// have a cap of their own. However many addresses hold idle
	// connections, a newcomer is served; a client whose idle keep-alive
	// connection was closed opens another (HTTP clients retry a request
	// on a reused connection that was closed).
	Total int
	// PerAddr bounds the connections open at once from one client address
	// (an IPv6 address by its /64, which one host can fill with addresses
	// of its own), so that one address cannot take the whole Total. A
	// connection over it is closed as soon as it is accepted. Behind a
	// reverse proxy every connection comes from the proxy's address: raise
	// it to Total there.
	PerAddr int
}

// defaultConnLimits are ample for a browser (six connections per server)
// and keyrate-load on one machine, and keep a flood of idle connections
// to about 22 MB.
var defaultConnLimits = connLimits{Total: 1024, PerAddr: 128}

// orDefault returns lim with its zero fields set to defaultConnLimits'.
func (lim connLimits) orDefault() connLimits {
	if lim.Total <= 0 {
		lim.Total = defaultConnLimits.Total
	}
	if lim.PerAddr <= 0 {
		lim.PerAddr = defaultConnLimits.PerAddr
	}
	return lim
}

// limitConns returns ln bounded by lim. Set the server's ConnState to its
// connState, so that it can tell idle connections from busy ones; without
// it every connection counts as idle.
func limitConns(ln net.Listener, lim connLimits) *addrListener {
	return &addrListener{Listener: ln, total: lim.Total, max: lim.PerAddr, open: make(map[string]map[*addrConn]struct{})}
}

// addrListener closes, as soon as it is accepted, a connection from an
// address that already holds max open ones, and makes room at total.
type addrListener struct {
	net.Listener
	total, max int
	mu         sync.Mutex
	n          int
	open       map[string]map[*addrConn]struct{} // open connections per address, for addresses with any
}

// Accept returns the next connection within its address's cap and the
// total, closing those over them.
func (l *addrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ac := &addrConn{Conn: c, l: l, addr: clientAddr(c.RemoteAddr())}
		ac.used.Store(time.Now().UnixNano())
		if evict, ok := l.admit(ac); ok {
			if evict != nil {
				evict.Conn.Close() // its server goroutine then ends, and gives nothing back twice
			}
			return ac, nil
		}
		c.Close()
	}
}

// connState is the http.Server's ConnState hook: a connection serving a
// request (StateActive, or taken over: StateHijacked) is busy until it is
// idle again.
func (l *addrListener) connState(c net.Conn, s http.ConnState) {
	ac, ok := c.(*addrConn)
	if !ok {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		ac.busy.Store(true)
	case http.StateNew, http.StateIdle:
		ac.busy.Store(false)
	}
}

// admit adds c, and reports whether it may stay, with the connection it
// takes the place of, if any.
func (l *addrListener) admit(c *addrConn) (evict *addrConn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := len(l.open[c.addr])
	if mine >= l.max {
		return nil, false
	}
	if l.n >= l.total {
		if evict = l.victim(mine); evict == nil {
			return nil, false
		}
		l.remove(evict)
	}
	set := l.open[c.addr]
	if set == nil {
		set = make(map[*addrConn]struct{})
		l.open[c.addr] = set
	}
	set[c] = struct{}{}
	l.n++
	return evict, true
}

// victim returns the connection a newcomer from an address holding mine
// takes the place of (see connLimits.Total), or nil for none. Called with
// mu held.
func (l *addrListener) victim(mine int) *addrConn {
	var most map[*addrConn]struct{}
	for _, set := range l.open {
		if len(set) > len(most) {
			most = set
		}
	}
	var lru *addrConn
	if len(most) >= mine+2 {
		for o := range most {
			if lru == nil || o.used.Load() < lru.used.Load() {
				lru = o
			}
		}
		return lru
	}
	for _, set := range l.open {
		for o := range set {
			if !o.busy.Load() && (lru == nil || o.used.Load() < lru.used.Load()) {
				lru = o
			}
		}
	}
	return lru
}

// remove takes c out once; called with mu held.
func (l *addrListener) remove(c *addrConn) {
	set := l.open[c.addr]
	if _, ok := set[c]; !ok {
		return
	}
	delete(set, c)
	if len(set) == 0 {
		delete(l.open, c.addr)
	}
	l.n--
}

// addrConn notes when it was last used, in either direction, and whether
// it is serving a request, and gives its address's place back once, on its
// first Close. A stream of the live page writes at least every keep-alive
// tick, so it is never the least recently used while idle keep-alive
// connections are open.
type addrConn struct {
	net.Conn
	l    *addrListener
	addr string
	used atomic.Int64 // UnixNano of the last read or write that moved data
	busy atomic.Bool  // serving a request, as the server's ConnState says
	once sync.Once
}

func (c *addrConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.used.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *addrConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.used.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.remove(c)
		c.l.mu.Unlock()
	})
	return err
}

// clientAddr names the client of a connection for its cap: its IP address,
// IPv4-mapped addresses as IPv4, an IPv6 one by its /64; anything that is
// not an IP address as it prints.
func clientAddr(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
