package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"time"
)

// reloader keeps the service's rules those of its source. It reads the
// source on every check and loads it when its content changed, so that
// an edit in place, a rename over a file, the symlink swap of a
// Kubernetes ConfigMap or of a runtime directory's root are all seen. A
// source that cannot be read or is invalid is logged, and the rules in
// force stay.
type reloader struct {
	src     source
	merge   bool // MERGE_DOMAIN_CONFIG
	svc     *service
	metrics *metrics
	log     *slog.Logger
	loaded  [sha256.Size]byte // the content last loaded or found invalid
	failed  string            // the last read error logged, so that each is logged once
	// onLoad, when set, learns of every rule set loaded.
	onLoad func(*ruleSet)
}

// digest returns a digest of files, names and contents.
func digest(files []configFile) [sha256.Size]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, f := range files {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f.name)))])
		h.Write([]byte(f.name))
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f.data)))])
		h.Write(f.data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// first reads and parses the source, for the load at start. Invalid rules
// (that do not parse, or a file past the bounds on its size) are not an
// error, as envoyproxy/ratelimit starts on them: first returns noRules and
// why in invalid, and the next change loads. err is a source that cannot
// be read.
func (r *reloader) first() (rs *ruleSet, invalid, err error) {
	files, err := r.src.read()
	if errors.Is(err, errRulesTooLarge) {
		r.failed = err.Error()
		return noRules(), err, nil
	}
	if err != nil {
		return nil, nil, err
	}
	r.loaded = digest(files)
	if rs, err = parseFiles(files, r.merge); err != nil {
		return noRules(), err, nil
	}
	return rs, nil, nil
}

// check loads the source if its content changed since the last check, and
// reports whether it did.
func (r *reloader) check() bool {
	files, err := r.src.read()
	if err != nil {
		if msg := err.Error(); msg != r.failed {
			r.failed = msg
			if errors.Is(err, errRulesTooLarge) {
				// Refused unread: invalid, as rules that do not parse are.
				r.metrics.configLoaded(err)
				r.log.Error("invalid configuration; the rules in force stay", "err", err)
			} else {
				r.log.Error("cannot read the configuration; the rules in force stay", "err", err)
			}
		}
		return false
	}
	r.failed = ""
	sum := digest(files)
	if sum == r.loaded {
		return false
	}
	// An invalid file is logged once, not at every check until it is fixed.
	r.loaded = sum
	rs, err := parseFiles(files, r.merge)
	if err == nil {
		err = r.svc.load(rs)
	}
	r.metrics.configLoaded(err)
	if err != nil {
		r.log.Error("invalid configuration; the rules in force stay", "err", err)
		return false
	}
	if r.onLoad != nil {
		r.onLoad(rs)
	}
	r.log.Info("configuration reloaded", "domains", len(rs.domains), "rules", len(rs.rules))
	return true
}

// run checks the source every interval (never, if it is 0), whenever
// trigger receives (SIGHUP) and, when changed is not nil, after it sends
// (a change the watcher saw), until ctx ends.
func (r *reloader) run(ctx context.Context, interval time.Duration, trigger <-chan os.Signal, changed <-chan struct{}) {
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
		case _, ok := <-changed:
			if !ok {
				changed = nil
				continue
			}
		}
		r.check()
	}
}
