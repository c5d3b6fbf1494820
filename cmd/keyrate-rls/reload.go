package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"time"
)

// reloader keeps the service's rules those of the configuration file. It
// reads the file on every check and loads it when its content changed, so
// that an edit in place, a rename over it and the symlink swap of a
// Kubernetes ConfigMap are all seen. A file that cannot be read or is
// invalid is logged, and the rules in force stay.
type reloader struct {
	path    string
	svc     *service
	metrics *metrics
	log     *slog.Logger
	loaded  [sha256.Size]byte // the content last loaded or found invalid
	failed  string            // the last read error logged, so that each is logged once
}

// check loads the file if its content changed since the last check, and
// reports whether it did.
func (r *reloader) check() bool {
	data, err := os.ReadFile(r.path)
	if err != nil {
		if msg := err.Error(); msg != r.failed {
			r.failed = msg
			r.log.Error("cannot read the configuration; the rules in force stay", "err", err)
		}
		return false
	}
	r.failed = ""
	sum := sha256.Sum256(data)
	if sum == r.loaded {
		return false
	}
	// An invalid file is logged once, not at every check until it is fixed.
	r.loaded = sum
	rs, err := parseConfig(r.path, data)
	if err == nil {
		err = r.svc.load(rs)
	}
	r.metrics.configLoaded(err)
	if err != nil {
		r.log.Error("invalid configuration; the rules in force stay", "err", err)
		return false
	}
	r.log.Info("configuration reloaded", "domains", len(rs.domains), "rules", len(rs.rules))
	return true
}

// run checks the file every interval (never, if it is 0) and whenever
// trigger receives (SIGHUP), until ctx ends.
func (r *reloader) run(ctx context.Context, interval time.Duration, trigger <-chan os.Signal) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-trigger:
		}
		r.check()
	}
}
