package main

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connPool bounds the connections the service holds open on all its ports
// together: each costs a file descriptor, a goroutine and buffers, and
// 20,400 idle HTTP/2 connections once took every file descriptor of an
// unbounded service, after which it answered no one.
//
// No address may hold more than perAddr connections (an IPv6 address
// counts by its /64, which one host can fill with addresses of its own);
// one over it is closed as soon as it is accepted. At the total, a new
// connection from an address holding fewer than the address that holds
// the most takes the place of that address's connection read from least
// recently, so that no set of addresses can lock another out: a client
// with a connection or two always gets in. Connections that are not from
// an IP address (a Unix socket) count against the total only.
type connPool struct {
	total, perAddr int

	mu     sync.Mutex
	open   int
	byAddr map[string]map[*poolConn]struct{} // under mu, addresses with connections
}

// newConnPool returns a pool of at most total connections, perAddr from
// one address.
func newConnPool(total, perAddr int) *connPool {
	return &connPool{total: total, perAddr: perAddr, byAddr: map[string]map[*poolConn]struct{}{}}
}

// listen returns ln bounded by the pool.
func (p *connPool) listen(ln net.Listener) net.Listener { return &poolListener{Listener: ln, pool: p} }

// poolListener accepts the connections its pool has room for and closes
// the others.
type poolListener struct {
	net.Listener
	pool *connPool
}

func (l *poolListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if pc := l.pool.admit(c); pc != nil {
			return pc, nil
		}
	}
}

// admit returns c as a connection of the pool, or closes it and returns nil
// when its address is at its cap, or when the pool is full and no address
// holds more than c's would.
func (p *connPool) admit(c net.Conn) *poolConn {
	addr, ip := clientAddr(c.RemoteAddr())
	pc := &poolConn{Conn: c, pool: p, addr: addr}
	pc.read.Store(time.Now().UnixNano())
	var evict *poolConn
	p.mu.Lock()
	mine := len(p.byAddr[addr])
	switch {
	case ip && mine >= p.perAddr:
		p.mu.Unlock()
		c.Close()
		return nil
	case p.open >= p.total:
		evict = p.victim(mine)
		if evict == nil {
			p.mu.Unlock()
			c.Close()
			return nil
		}
		p.remove(evict)
	}
	set := p.byAddr[addr]
	if set == nil {
		set = map[*poolConn]struct{}{}
		p.byAddr[addr] = set
	}
	set[pc] = struct{}{}
	p.open++
	p.mu.Unlock()
	if evict != nil {
		evict.Conn.Close()
	}
	return pc
}

// victim returns the connection to close for a newcomer from an address
// that holds mine: of the address holding the most, more than mine+1, the
// one read from least recently; nil when no address holds that many.
// Called with mu held, at the total, where a scan of the addresses is
// the price of a full pool.
func (p *connPool) victim(mine int) *poolConn {
	var most map[*poolConn]struct{}
	for _, set := range p.byAddr {
		if len(set) > len(most) {
			most = set
		}
	}
	if len(most) <= mine+1 {
		return nil
	}
	var oldest *poolConn
	for c := range most {
		if oldest == nil || c.read.Load() < oldest.read.Load() {
			oldest = c
		}
	}
	return oldest
}

// remove takes c out of the pool once; called with mu held.
func (p *connPool) remove(c *poolConn) {
	set := p.byAddr[c.addr]
	if _, ok := set[c]; !ok {
		return
	}
	delete(set, c)
	if len(set) == 0 {
		delete(p.byAddr, c.addr)
	}
	p.open--
}

// Open returns the number of connections held.
func (p *connPool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// poolConn is a connection of a pool: it notes when it was last read
// from, and gives its place back when closed.
type poolConn struct {
	net.Conn
	pool *connPool
	addr string
	read atomic.Int64 // UnixNano of the last read that returned data
	once sync.Once
}

func (c *poolConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *poolConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.pool.mu.Lock()
		c.pool.remove(c)
		c.pool.mu.Unlock()
	})
	return err
}

// clientAddr names the client of a connection for its cap: its IP address,
// IPv4-mapped addresses as IPv4, an IPv6 one by its /64; anything that is
// not an IP address as it prints, with ip false.
func clientAddr(a net.Addr) (name string, ip bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String(), false
	}
	addr := ap.Addr().Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p.String(), true
	}
	return addr.String(), true
}
