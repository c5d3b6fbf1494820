package grpclimit

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/keyrate/keyrate/clientkey"
)

// Address grouping, as httplimit's defaults: one key per IPv4 address, one
// per IPv6 /64 (a host can pick any address in its /64 and would otherwise
// rotate past the limit).
const (
	v4bits = 32
	v6bits = 64
)

// identity returns the client a call counts against, and that client's
// identity as it sent it, for a backend's tier function (see
// backend.ContextWithIdentity):
//
//   - "name=value" for the metadata key, as httplimit.HeaderKey gives it,
//     bounded by clientkey.Bound as httplimit bounds every identity; sent
//     as the value alone, whatever its length;
//   - the peer's IP address, grouped ("192.0.2.1", "2001:db8:1:2::/64");
//   - "network:address" for a peer that is not an IP address (a Unix
//     socket, an in-memory listener): every such peer of one network and
//     address shares a budget, so give them a metadata key;
//   - "unknown" when the context carries no peer.
//
// The forms cannot collide: metadata names hold no ':', addresses no '='.
// Save for the metadata value, each is sent as it is.
func (l *Limiter) identity(ctx context.Context) (id, sent string) {
	if l.mdKey != "" {
		if v := metadata.ValueFromIncomingContext(ctx, l.mdKey); len(v) > 0 && v[0] != "" {
			return clientkey.Bound(l.mdKey + "=" + v[0]), v[0]
		}
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown", "unknown"
	}
	if a, ok := peerIP(p.Addr); ok {
		id = clientkey.Addr(a, v4bits, v6bits)
	} else {
		id = p.Addr.Network() + ":" + clientkey.Bound(p.Addr.String())
	}
	return id, id
}

func peerIP(a net.Addr) (netip.Addr, bool) {
	if tcp, ok := a.(*net.TCPAddr); ok {
		ip, ok := netip.AddrFromSlice(tcp.IP)
		return ip, ok
	}
	ap, err := netip.ParseAddrPort(a.String())
	return ap.Addr(), err == nil
}

// validMetadataKey reports whether name (lower case) is a metadata key a
// client can send and gRPC does not reserve.
func validMetadataKey(name string) bool {
	if name == "" || strings.HasPrefix(name, "grpc-") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// validMethod reports whether m looks like a full method name,
// "/pkg.Service/Method", in printable ASCII.
func validMethod(m string) bool {
	i := strings.LastIndexByte(m, '/')
	if len(m) < 3 || m[0] != '/' || i <= 1 || i == len(m)-1 {
		return false
	}
	for j := 0; j < len(m); j++ {
		if m[j] <= 0x20 || m[j] > 0x7e {
			return false
		}
	}
	return true
}
