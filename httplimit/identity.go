package httplimit

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/clientkey"
)

// KeyFunc maps a request to the identity it is limited by. The middleware
// bounds it (over 128 bytes, its SHA-256 digest stands for it) and prefixes
// the route. An error or an empty identity gets the request a 400, never
// service (see WithKeyFunc): return one only for a request that truly
// carries nothing to limit it by. Identities should not contain "\x00",
// which separates the parts of a key.
type KeyFunc func(*http.Request) (string, error)

// IPConfig says how ClientIP reads a request's client address. The zero
// IPConfig is the default: no proxy trusted (the socket's address), one
// key per IPv4 address and per IPv6 /64. See the README, "Identity".
type IPConfig struct {
	// TrustHops says that exactly n reverse proxies stand in front of the
	// server, each appending to X-Forwarded-For, as Express's "trust proxy
	// n" does: the client is the n-th entry from the right (the leftmost
	// when there are fewer); entries further left, which the client wrote,
	// are never read. Set it to the real number: one too many hands the
	// choice of key to the client, one too few limits the proxy. 0 to 32.
	TrustHops int

	// TrustProxies says that these addresses belong to reverse proxies that
	// append to X-Forwarded-For: walking the header from the right, the
	// client is the first address not in them (when all are, the
	// leftmost). They must cover proxies only: a client inside them could
	// choose its key. Exclusive with TrustHops.
	TrustProxies []netip.Prefix

	// IPv4Bits and IPv6Bits are the prefix lengths clients are grouped by;
	// 0 means 32 and 64. A host can pick any of 2^64 addresses in an IPv6
	// /64, the smallest network usually assigned to one subscriber, so
	// limiting single IPv6 addresses would let it rotate past the limit.
	IPv4Bits, IPv6Bits int
}

// ipConfig is a checked IPConfig, as the KeyFunc reads it.
type ipConfig struct {
	hops    int
	proxies []netip.Prefix
	v4bits  int
	v6bits  int
}

// Bounds on what the X-Forwarded-For walk reads: a longer entry is not an
// address, and a longer chain of trusted proxies is not a real deployment.
const (
	maxEntryLen = 100
	maxWalk     = 32
)

// ClientIP returns a KeyFunc that identifies a request by its client's IP
// address, grouped by prefix, as text: "192.0.2.1", "2001:db8:1:2::/64".
// With the zero IPConfig the address is the socket's, whatever the
// request's headers say; with TrustHops or TrustProxies it is read from
// X-Forwarded-For, and anything unexpected in the part trusted proxies
// wrote falls back to the socket's address, never to a value the client
// chose (see the README, "Identity"). The KeyFunc fails only when
// RemoteAddr is not an address. An invalid IPConfig gives an error
// wrapping keyrate.ErrConfig that names the field.
func ClientIP(cfg IPConfig) (KeyFunc, error) {
	c := ipConfig{hops: cfg.TrustHops, v4bits: cfg.IPv4Bits, v6bits: cfg.IPv6Bits}
	if c.v4bits == 0 {
		c.v4bits = 32
	}
	if c.v6bits == 0 {
		c.v6bits = 64
	}
	switch {
	case c.hops < 0:
		return nil, fmt.Errorf("%w: httplimit: IPConfig.TrustHops is %d, want >= 0", keyrate.ErrConfig, c.hops)
	case c.hops > maxWalk:
		return nil, fmt.Errorf("%w: httplimit: IPConfig.TrustHops is %d, want at most %d", keyrate.ErrConfig, c.hops, maxWalk)
	case c.hops > 0 && len(cfg.TrustProxies) > 0:
		return nil, fmt.Errorf("%w: httplimit: IPConfig.TrustHops and IPConfig.TrustProxies are exclusive", keyrate.ErrConfig)
	case c.v4bits < 0 || c.v4bits > 32:
		return nil, fmt.Errorf("%w: httplimit: IPConfig.IPv4Bits is %d, want 1 to 32 (0: 32)", keyrate.ErrConfig, c.v4bits)
	case c.v6bits < 0 || c.v6bits > 128:
		return nil, fmt.Errorf("%w: httplimit: IPConfig.IPv6Bits is %d, want 1 to 128 (0: 64)", keyrate.ErrConfig, c.v6bits)
	}
	c.proxies = make([]netip.Prefix, len(cfg.TrustProxies))
	for i, p := range cfg.TrustProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: httplimit: IPConfig.TrustProxies[%d] is an invalid prefix", keyrate.ErrConfig, i)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96) // addresses are compared unmapped
		}
		c.proxies[i] = p.Masked()
	}
	return c.key, nil
}

func (c *ipConfig) key(r *http.Request) (string, error) {
	a, err := c.addr(r)
	if err != nil {
		return "", err
	}
	return clientkey.Addr(a, c.v4bits, c.v6bits), nil
}

// appendKey appends the identity key returns to dst, so that the middleware
// can build route and identity in one buffer.
func (c *ipConfig) appendKey(dst []byte, r *http.Request) ([]byte, error) {
	a, err := c.addr(r)
	if err != nil {
		return dst, err
	}
	return clientkey.AppendAddr(dst, a, c.v4bits, c.v6bits), nil
}

// defaultIP is ClientIP's configuration for the zero IPConfig.
func defaultIP() *ipConfig { return &ipConfig{v4bits: 32, v6bits: 64} }

// errRemoteAddr is returned for a RemoteAddr that holds no IP address.
var errRemoteAddr = errors.New("httplimit: RemoteAddr is not an IP address")

// addr returns the client's address, unmapped and without zone.
func (c *ipConfig) addr(r *http.Request) (netip.Addr, error) {
	sock, ok := parseAddr(r.RemoteAddr, true)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: %q", errRemoteAddr, r.RemoteAddr)
	}
	if c.hops == 0 && len(c.proxies) == 0 {
		return sock, nil
	}
	xff := forwardedWalk{lines: r.Header["X-Forwarded-For"]}
	xff.i = len(xff.lines)
	client := sock
	for step := 0; ; step++ {
		if c.hops > 0 && step == c.hops || c.hops == 0 && !c.trusted(client) {
			return client, nil
		}
		if step == maxWalk {
			return sock, nil
		}
		entry, more := xff.next()
		if !more {
			return client, nil // a shorter chain: the furthest address a trusted proxy wrote
		}
		a, ok := parseAddr(entry, false)
		if !ok {
			return sock, nil // garbage where a trusted proxy should have written
		}
		client = a
	}
}

func (c *ipConfig) trusted(a netip.Addr) bool {
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedWalk yields X-Forwarded-For entries from the right, across
// several header lines (which count as one comma-separated list).
type forwardedWalk struct {
	lines []string
	i     int    // lines[i:] are consumed, except rest
	rest  string // what is left of lines[i] while open
	open  bool
}

func (w *forwardedWalk) next() (string, bool) {
	if !w.open {
		if w.i == 0 {
			return "", false
		}
		w.i--
		w.rest, w.open = w.lines[w.i], true
	}
	var entry string
	if j := strings.LastIndexByte(w.rest, ','); j >= 0 {
		entry, w.rest = w.rest[j+1:], w.rest[:j]
	} else {
		entry, w.open = w.rest, false
	}
	return strings.Trim(entry, " \t"), true
}

// parseAddr reads "addr", "addr:port", "[addr]:port" or "[addr]", and
// returns the address unmapped and without zone. portLikely orders the
// attempts so the common form parses first (a failed parse allocates).
func parseAddr(s string, portLikely bool) (netip.Addr, bool) {
	if len(s) == 0 || len(s) > maxEntryLen {
		return netip.Addr{}, false
	}
	a, ok := netip.Addr{}, false
	if portLikely {
		a, ok = parseWithPort(s)
	}
	if !ok {
		if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
			s = s[1 : len(s)-1]
		}
		a, ok = parseBare(s)
	}
	if !ok && !portLikely {
		a, ok = parseWithPort(s)
	}
	return a.Unmap().WithZone(""), ok
}

func parseWithPort(s string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(s)
	return ap.Addr(), err == nil
}

func parseBare(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

// HeaderKey returns a KeyFunc that identifies a request by the value of the
// named header (an API key, say) when present and not empty, as
// "name=value" with the name in lower case ("x-api-key=alice", as
// grpclimit.WithMetadataKey gives for metadata), and by fallback otherwise
// (nil: ClientIP's default). A backend's tier function sees the value
// alone. The value is taken as given: validate API keys before this
// middleware runs, or a client can mint fresh budgets by sending new keys
// (see the README, "Identity").
func HeaderKey(header string, fallback KeyFunc) KeyFunc {
	name := http.CanonicalHeaderKey(header)
	prefix := strings.ToLower(name) + "="
	keyHeader(prefix[:len(prefix)-1], name)
	if fallback == nil {
		fallback = defaultIP().key
	}
	return func(r *http.Request) (string, error) {
		if v := r.Header[name]; len(v) > 0 && v[0] != "" {
			return prefix + v[0], nil
		}
		return fallback(r)
	}
}

// headerKeys maps the names in the identities HeaderKey returns (lower
// case) to the canonical names of the headers they are read from, for
// sentIdentity: a program makes a handful of HeaderKeys, so the map stays
// small, and is read without a lock on every request.
var headerKeys struct {
	mu    sync.Mutex // serialises the copies that add a name
	names atomic.Pointer[map[string]string]
}

// keyHeader adds name, read from the header canonical, to headerKeys.
func keyHeader(name, canonical string) {
	headerKeys.mu.Lock()
	defer headerKeys.mu.Unlock()
	old := headerKeys.names.Load()
	if old != nil && (*old)[name] == canonical {
		return
	}
	names := map[string]string{name: canonical}
	if old != nil {
		maps.Copy(names, *old)
	}
	headerKeys.names.Store(&names)
}

// keyedHeader returns the canonical name of the header that HeaderKey
// reads for the identities named name, and whether there is one.
func keyedHeader(name string) (string, bool) {
	names := headerKeys.names.Load()
	if names == nil {
		return "", false
	}
	canonical, ok := (*names)[name]
	return canonical, ok
}

// Join returns a KeyFunc whose identity is every fs's, joined by "\x00":
// for a budget per user per address, say. It fails if any of them does.
func Join(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		parts := make([]string, len(fs))
		for i, f := range fs {
			id, err := f(r)
			if err != nil {
				return "", err
			}
			parts[i] = id
		}
		return strings.Join(parts, "\x00"), nil
	}
}
