package main

import (
	"net"
	"net/http"
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
// connection always gets in, in the place of the connection read from
// least recently, whoever holds it: per-address fairness alone cannot
// hold the pool, as many addresses of one connection each (4,100 of them,
// or one IPv6 /52) would leave no address holding more than a newcomer.
// Only when every connection has been read within busyWithin does the
// address holding the most, if it holds more than the newcomer's would
// and one more, give way instead, its connection read least recently. A
// connection that has sent no request within requestTimeout of its
// accept is closed (see requested). Connections that are not from an IP
// address (a Unix socket) count against the total only, and have no
// request deadline.
type connPool struct {
	total, perAddr int
	// requestTimeout closes a connection with no request by then; 0: none.
	requestTimeout time.Duration

	mu     sync.Mutex
	open   int
	byAddr map[string]map[*poolConn]struct{} // under mu, addresses with connections
	byPeer map[string]*poolConn              // under mu, IP connections by peerKey
}

// busyWithin is how recently every connection must have been read for
// the pool to count as busy, when the address holding the most gives way
// rather than the connection idle longest.
const busyWithin = time.Second

// newConnPool returns a pool of at most total connections, perAddr from
// one address, each closed when it has sent no request within
// requestTimeout (0: never).
func newConnPool(total, perAddr int, requestTimeout time.Duration) *connPool {
	return &connPool{total: total, perAddr: perAddr, requestTimeout: requestTimeout,
		byAddr: map[string]map[*poolConn]struct{}{}, byPeer: map[string]*poolConn{}}
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
// when its address is at its cap. At the total, another connection gives
// way (see victim).
func (p *connPool) admit(c net.Conn) *poolConn {
	addr, ip := clientAddr(c.RemoteAddr())
	pc := &poolConn{Conn: c, pool: p, addr: addr}
	now := time.Now()
	pc.read.Store(now.UnixNano())
	var evict *poolConn
	p.mu.Lock()
	mine := len(p.byAddr[addr])
	switch {
	case ip && mine >= p.perAddr:
		p.mu.Unlock()
		c.Close()
		return nil
	case p.open >= p.total:
		evict = p.victim(mine, now)
		p.remove(evict)
	}
	set := p.byAddr[addr]
	if set == nil {
		set = map[*poolConn]struct{}{}
		p.byAddr[addr] = set
	}
	set[pc] = struct{}{}
	p.open++
	if ip && p.requestTimeout > 0 {
		pc.key = peerKey(c.LocalAddr(), c.RemoteAddr())
		p.byPeer[pc.key] = pc
		pc.deadline = time.AfterFunc(p.requestTimeout, func() {
			if !pc.requested.Load() {
				pc.Close()
			}
		})
	}
	p.mu.Unlock()
	if evict != nil {
		evict.Conn.Close()
	}
	return pc
}

// victim returns the connection to close for a newcomer from an address
// that holds mine, at the total: the connection read from least recently;
// but when even that one was read within busyWithin, the one read least
// recently of the address holding the most, if that is more than mine+1.
// Called with mu held, at the total, where a scan of the connections is
// the price of a full pool.
func (p *connPool) victim(mine int, now time.Time) *poolConn {
	var oldest *poolConn
	var most map[*poolConn]struct{}
	for _, set := range p.byAddr {
		if len(set) > len(most) {
			most = set
		}
		for c := range set {
			if oldest == nil || c.read.Load() < oldest.read.Load() {
				oldest = c
			}
		}
	}
	if now.UnixNano()-oldest.read.Load() >= int64(busyWithin) || len(most) <= mine+1 {
		return oldest
	}
	var fair *poolConn
	for c := range most {
		if fair == nil || c.read.Load() < fair.read.Load() {
			fair = c
		}
	}
	return fair
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
	if c.key != "" && p.byPeer[c.key] == c {
		delete(p.byPeer, c.key)
	}
	if c.deadline != nil {
		c.deadline.Stop()
	}
	p.open--
}

// requested notes that the connection between local and remote (a gRPC
// call's peer) has sent a request, so that it outlives requestTimeout.
func (p *connPool) requested(local, remote net.Addr) {
	if local == nil || remote == nil {
		return
	}
	p.mu.Lock()
	pc := p.byPeer[peerKey(local, remote)]
	p.mu.Unlock()
	if pc != nil {
		pc.requested.Store(true)
	}
}

// connState is the HTTP servers' ConnState hook: a connection whose
// request has begun has sent one.
func (p *connPool) connState(c net.Conn, st http.ConnState) {
	if pc, ok := c.(*poolConn); ok && st == http.StateActive {
		pc.requested.Store(true)
	}
}

// peerKey names a connection by both its ends.
func peerKey(local, remote net.Addr) string { return local.String() + " " + remote.String() }

// Open returns the number of connections held.
func (p *connPool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// poolConn is a connection of a pool: it notes when it was last read
// from and whether it has sent a request, and gives its place back when
// closed.
type poolConn struct {
	net.Conn
	pool      *connPool
	addr      string
	key       string       // peerKey, for an IP connection with a request deadline
	deadline  *time.Timer  // closes it without a request by then; nil: none
	requested atomic.Bool  // it has sent a request
	read      atomic.Int64 // UnixNano of the last read that returned data
	once      sync.Once
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
