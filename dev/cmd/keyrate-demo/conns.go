package main

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/netutil"
)

// connLimits bound the connections the server holds open. Each costs a
// file descriptor, a goroutine and buffers (about 21 KB when idle after a
// request): 20,000 idle keep-alive connections from one address took an
// unbounded demo to 812 MB and out of file descriptors, after which it
// accepted no one.
type connLimits struct {
	// Total bounds the connections open at once. Once it is reached, new
	// connections wait in the kernel's listen backlog until one closes
	// (the timeouts close idle and stalled ones).
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

// limitConns returns ln bounded by lim: netutil.LimitListener holds the
// total, and addrListener the share of each address within it.
func limitConns(ln net.Listener, lim connLimits) net.Listener {
	return &addrListener{Listener: netutil.LimitListener(ln, lim.Total), max: lim.PerAddr, open: make(map[string]int)}
}

// addrListener closes, as soon as it is accepted, a connection from an
// address that already holds max open ones.
type addrListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int // open connections per address, for addresses with any
}

// Accept returns the next connection within its address's cap, closing
// those over it.
func (l *addrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c.RemoteAddr())
		l.mu.Lock()
		full := l.open[addr] >= l.max
		if !full {
			l.open[addr]++
		}
		l.mu.Unlock()
		if !full {
			return &addrConn{Conn: c, l: l, addr: addr}, nil
		}
		c.Close() // also frees its place in the total
	}
}

func (l *addrListener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] == 0 {
		delete(l.open, addr)
	}
}

// addrConn gives its address's place back once, on its first Close.
type addrConn struct {
	net.Conn
	l    *addrListener
	addr string
	once sync.Once
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
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
