package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// dialRedis returns a client of the Redis server that addr names, once it
// answers PING, so that a wrong address or password stops the demo at
// start-up instead of failing every request. addr is a host:port, or a URL
// as go-redis reads one (redis.ParseURL): redis://[user:password@]host[:port][/db],
// rediss:// for TLS, unix:///path. Its errors show addr as shownRedis does,
// without a password. Later outages are the limiters' to report: the
// middleware then serves requests unlimited (it fails open) and logs why,
// unless -redis-fallback has them decided in this process.
func dialRedis(ctx context.Context, addr string) (*redis.Client, error) {
	opts, err := redisOptions(addr)
	if err != nil {
		return nil, err
	}
	// Lets each call stop at the limiter's time budget by itself, with no
	// goroutine hand-off (see redislimit's package doc).
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("no Redis at %s: %s", shownRedis(addr), scrub(err.Error(), opts.Password))
	}
	return c, nil
}

// dialRedisQuietly is dialRedis with go-redis's log silenced until it
// returns, for the start-up check: a wrong address would otherwise print
// the pool's failed dials, four lines, before dialRedis's one clear error.
// go-redis's default log is back afterwards, for later outages.
func dialRedisQuietly(ctx context.Context, addr string) (*redis.Client, error) {
	logging.Disable()
	defer logging.Enable()
	return dialRedis(ctx, addr)
}

// redisOptions reads -redis: a URL (anything with "://") as redis.ParseURL
// does, else a plain host:port. Its errors never show a password.
func redisOptions(addr string) (*redis.Options, error) {
	if !strings.Contains(addr, "://") {
		return &redis.Options{Addr: addr}, nil
	}
	opts, err := redis.ParseURL(addr)
	if err == nil {
		return opts, nil
	}
	shown := shownRedis(addr)
	if shown != addr {
		// go-redis's error may quote a part of the user part, as the
		// database number of redis://:pa/ss@host.
		return nil, fmt.Errorf("-redis %s: not a Redis URL; want redis://[user:password@]host[:port][/db], rediss://... for TLS, or unix:///path", shown)
	}
	var ue *url.Error
	if errors.As(err, &ue) { // its text repeats the URL
		err = ue.Err
	}
	return nil, fmt.Errorf("-redis %s: %v", shown, err)
}

// shownRedis returns -redis as messages may show it: a URL's user part
// (its password, and the user name beside it) replaced by "xxxxx", up to
// its last "@", so that a password holding "/" or "@" does not show
// either.
func shownRedis(addr string) string {
	scheme, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return addr
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return scheme + "://xxxxx" + rest[i:]
	}
	return addr
}

// scrub returns msg with every occurrence of secret replaced by "xxxxx".
func scrub(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "xxxxx")
}

// checkFallback checks -redis-fallback's share: 0 (off), or in (0, 1]
// and with -redis.
func checkFallback(share float64, redisAddr string) error {
	switch {
	case share == 0:
		return nil
	case !(share > 0 && share <= 1):
		return fmt.Errorf("-redis-fallback is %v, want a share in (0, 1], or 0 for none", share)
	case redisAddr == "":
		return errors.New("-redis-fallback needs -redis: budgets in this process have no outage to fall back from")
	}
	return nil
}
