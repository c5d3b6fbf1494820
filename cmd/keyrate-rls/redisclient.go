package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisEnv is the Redis of envoyproxy/ratelimit's environment (see
// settings.backend), before the flags.
type redisEnv struct {
	set                    bool
	url, socket, kind      string
	poolSize               int
	auth, sentinelAuth     string
	tls, tlsSkipVerify     bool
	tlsCert, tlsKey, tlsCA string
}

// redisConn is how to reach Redis beyond -redis and -redis-cluster's
// addresses: the environment's socket type, Sentinel, pool size,
// credentials and TLS. The zero value is go-redis's defaults over TCP.
type redisConn struct {
	network            string   // "tcp" (or "") or "unix"
	sentinelMaster     string   // REDIS_TYPE=SENTINEL: the master's name...
	sentinels          []string // ... and the sentinels
	poolSize           int      // 0: go-redis's default
	db                 int      // the database a redis:// URL names; 0 by default
	username, password string
	sentinelPassword   string
	tls                *tls.Config
}

// newClient returns a client of the Redis o names.
func (o redisOptions) newClient() redis.UniversalClient {
	c := o.conn
	switch {
	case c.sentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: c.sentinelMaster, SentinelAddrs: c.sentinels, SentinelPassword: c.sentinelPassword,
			Username: c.username, Password: c.password, DB: c.db, PoolSize: c.poolSize, TLSConfig: c.tls,
			ContextTimeoutEnabled: true,
		})
	case len(o.cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.cluster, Username: c.username, Password: c.password, PoolSize: c.poolSize, TLSConfig: c.tls,
		})
	}
	// ContextTimeoutEnabled lets each call stop at the limiter's time
	// budget by itself, with no goroutine hand-off (see redislimit's
	// package doc).
	return redis.NewClient(&redis.Options{
		Network: c.network, Addr: o.addr, Username: c.username, Password: c.password, DB: c.db,
		PoolSize: c.poolSize, TLSConfig: c.tls, ContextTimeoutEnabled: true,
	})
}

// fromEnv returns the addresses and connection of the environment's Redis,
// read as envoyproxy/ratelimit reads them: REDIS_URL is host:port (or a
// redis:// URL, or with REDIS_SOCKET_TYPE=unix a socket's path), several
// of them comma-separated for a CLUSTER, and for SENTINEL the master's
// name then the sentinels; REDIS_AUTH is a password or user:password.
// Without REDIS_SOCKET_TYPE, a URL that is a path is a Unix socket.
func (e redisEnv) fromEnv() (addr string, cluster []string, conn redisConn, err error) {
	conn.poolSize = e.poolSize
	if e.auth != "" {
		if user, pass, ok := strings.Cut(e.auth, ":"); ok {
			conn.username, conn.password = user, pass
		} else {
			conn.password = e.auth
		}
	}
	conn.sentinelPassword = e.sentinelAuth
	if e.tls {
		if conn.tls, err = e.tlsConfig(); err != nil {
			return "", nil, conn, err
		}
	}
	urls := strings.Split(e.url, ",")
	for i, u := range urls {
		if urls[i], err = e.address(strings.TrimSpace(u), &conn); err != nil {
			return "", nil, conn, err
		}
	}
	switch e.kind {
	case "SINGLE":
		if len(urls) != 1 {
			return "", nil, conn, errors.New("REDIS_URL holds several addresses: give REDIS_TYPE=CLUSTER for a Redis Cluster")
		}
		return urls[0], nil, conn, nil
	case "CLUSTER":
		return "", urls, conn, nil
	case "SENTINEL":
		if len(urls) < 2 {
			return "", nil, conn, errors.New("REDIS_URL for REDIS_TYPE=SENTINEL is the master's name, then the sentinels: name,host:port,...")
		}
		conn.sentinelMaster, conn.sentinels = strings.Split(e.url, ",")[0], urls[1:]
		return "sentinel master " + conn.sentinelMaster, nil, conn, nil
	}
	return "", nil, conn, fmt.Errorf("REDIS_TYPE is %q, want SINGLE, CLUSTER or SENTINEL", e.kind)
}

// address reads one address of REDIS_URL, and its socket type into conn.
func (e redisEnv) address(u string, conn *redisConn) (string, error) {
	if isRedisURL(u) {
		return parseRedisURL("REDIS_URL", u, conn)
	}
	switch strings.ToLower(e.socket) {
	case "unix":
		conn.network = "unix"
	case "tcp":
		conn.network = "tcp"
	case "":
		if strings.HasPrefix(u, "/") {
			conn.network = "unix"
		}
	default:
		return "", fmt.Errorf("REDIS_SOCKET_TYPE is %q, want tcp or unix", e.socket)
	}
	return u, nil
}

// isRedisURL reports whether an address is a redis:// or rediss:// URL
// rather than a host:port or a socket's path.
func isRedisURL(u string) bool {
	return strings.HasPrefix(u, "redis://") || strings.HasPrefix(u, "rediss://")
}

// parseRedisURL reads a redis:// or rediss:// URL as go-redis does
// (redis.ParseURL): it returns its host:port, and sets conn's credentials,
// database and, for rediss://, TLS from it (TLS settings already there
// stay). what names the setting in errors, which never hold the URL's
// password.
func parseRedisURL(what, raw string, conn *redisConn) (string, error) {
	opt, err := redis.ParseURL(raw)
	if err != nil {
		u, uerr := url.Parse(raw)
		if uerr != nil {
			// url.Parse's message quotes the URL, password and all.
			return "", fmt.Errorf("%s is not a URL that parses", what)
		}
		red := u.Redacted()
		return "", fmt.Errorf("%s %s: %s", what, red, strings.ReplaceAll(err.Error(), raw, red))
	}
	if opt.Password != "" || opt.Username != "" {
		conn.username, conn.password = opt.Username, opt.Password
	}
	conn.db = opt.DB
	if opt.TLSConfig != nil && conn.tls == nil {
		conn.tls = opt.TLSConfig
	}
	return opt.Addr, nil
}

// redactAddr returns an address for errors and logs: a URL with its
// password replaced by "xxxxx"; anything else as it is.
func redactAddr(addr string) string {
	if !isRedisURL(addr) {
		return addr
	}
	if u, err := url.Parse(addr); err == nil {
		return u.Redacted()
	}
	return "(a URL that does not parse)"
}

// tlsConfig returns the TLS settings of REDIS_TLS: the client certificate
// and key (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY), the CA that signs
// the server's (REDIS_TLS_CACERT; default: the system's), and whether to
// skip checking the server's name (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
func (e redisEnv) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.tlsCert != "" || e.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(e.tlsCert, e.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if e.tlsCA != "" {
		pem, err := os.ReadFile(e.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %s holds no PEM certificate", e.tlsCA)
		}
	}
	if e.tlsSkipVerify {
		// As envoyproxy/ratelimit does: the chain is still checked, the
		// name is not.
		cfg.InsecureSkipVerify = true
		roots := cfg.RootCAs
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs := make([]*x509.Certificate, len(raw))
			for i, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs[i] = c
			}
			if len(certs) == 0 {
				return errors.New("the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range certs[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := certs[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}
