package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// source is where the rules come from: a file (-config) or
// envoyproxy/ratelimit's runtime directory.
type source interface {
	// read returns the configuration's files, in an order that does not
	// change between reads of the same files.
	read() ([]configFile, error)
	// watched returns the directories whose changes may change what read
	// returns.
	watched() []string
	// String names the source in logs.
	String() string
}

// fileSource is one file of rules, -config's.
type fileSource struct{ path string }

func (f fileSource) read() ([]configFile, error) {
	data, err := readRulesFile(f.path, maxRulesFile)
	if err != nil {
		return nil, err
	}
	return []configFile{{name: f.path, data: data}}, nil
}

// The bounds on what a read of the rules takes in: each file at most
// maxRulesFile bytes, all the files of a runtime directory together at
// most maxRulesTotal. Parsing takes some tens of times a file's size; a
// file of 100 MB once took minutes and 6.9 GB before it was refused.
// 4 MiB holds some 100,000 lines of rules.
const (
	maxRulesFile  = 4 << 20
	maxRulesTotal = 16 << 20
)

// errRulesTooLarge reports rules past maxRulesFile or maxRulesTotal: an
// invalid configuration, as a parse error is, not a failure to read.
var errRulesTooLarge = errors.New("too large")

// readRulesFile reads the file at path, of at most limit bytes: a larger
// one is refused, naming its size, not its content, without reading past
// the bound (a file that grows while it is read included).
func readRulesFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tooLarge := func(size int64) error {
		return fmt.Errorf("%s: %w: %d bytes or more, past the bound of %d a rules file may hold", path, errRulesTooLarge, size, limit)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > limit {
		return nil, tooLarge(fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge(int64(len(data)))
	}
	return data, nil
}

func (f fileSource) watched() []string { return []string{filepath.Dir(f.path)} }

func (f fileSource) String() string { return f.path }

// runtimeDir is envoyproxy/ratelimit's runtime directory: the files under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, at any depth,
// one domain or more each. RUNTIME_ROOT is typically a symbolic link that
// a deployment swaps to a new version of the files (what
// envoyproxy/ratelimit's RUNTIME_WATCH_ROOT=true watches for), or the files
// change in place (what it watches for with false): keyrate-rls sees both,
// whichever the setting, and reads the same files either way.
type runtimeDir struct {
	root, sub, app string
	ignoreDotFiles bool // RUNTIME_IGNOREDOTFILES: skip files and directories whose name starts with '.'
}

// defaultRuntimeRoot is envoyproxy/ratelimit's RUNTIME_ROOT default.
const defaultRuntimeRoot = "/srv/runtime_data/current"

// dir returns the directory of the rule files.
func (r runtimeDir) dir() string { return filepath.Join(r.root, r.sub, r.app) }

func (r runtimeDir) String() string { return r.dir() }

// read returns every file under the directory, by path. A symbolic link to
// a file is read; one to a directory is not followed (a Kubernetes
// ConfigMap's ..data link, whose files the top level links to already).
// A file that cannot be read fails the whole read, so that a file the
// service could not see never drops its domains.
func (r runtimeDir) read() ([]configFile, error) {
	top := r.dir()
	real, err := filepath.EvalSymlinks(top)
	if err != nil {
		return nil, err
	}
	var files []configFile
	var total int64 // the bytes read so far, at most maxRulesTotal
	err = filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != real && r.ignoreDotFiles && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if fi, err := os.Stat(path); err == nil && fi.IsDir() {
				return nil
			}
		}
		limit, whole := int64(maxRulesFile), false
		if left := maxRulesTotal - total; left < limit {
			limit, whole = left, true
		}
		data, err := readRulesFile(path, limit)
		if whole && errors.Is(err, errRulesTooLarge) {
			return fmt.Errorf("%s: %w: the files of %s hold more than the %d bytes the rules may hold together", path, errRulesTooLarge, top, maxRulesTotal)
		}
		if err != nil {
			return err
		}
		total += int64(len(data))
		rel, _ := filepath.Rel(real, path)
		files = append(files, configFile{name: filepath.Join(top, rel), data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return files, nil
}

// watched returns the directory of RUNTIME_ROOT (where a link swap
// happens), RUNTIME_ROOT itself, the subdirectory, and every directory
// under the rule files' directory.
func (r runtimeDir) watched() []string {
	dirs := []string{filepath.Dir(r.root), r.root, filepath.Join(r.root, r.sub)}
	top := r.dir()
	real, err := filepath.EvalSymlinks(top)
	if err != nil {
		return dirs
	}
	filepath.WalkDir(real, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	return dirs
}

// checkSource reports a source that cannot be read at start: a missing
// runtime directory is a clearer error than an empty set of rules.
func checkSource(src source) error {
	r, ok := src.(runtimeDir)
	if !ok {
		return nil
	}
	fi, err := os.Stat(r.dir())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no rules: the runtime directory %s does not exist (RUNTIME_ROOT=%s, RUNTIME_SUBDIRECTORY=%s, RUNTIME_APPDIRECTORY=%s); give -config FILE or set those",
			r.dir(), r.root, r.sub, r.app)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("no rules: the runtime directory %s is not a directory", r.dir())
	}
	return nil
}

// watchDebounce is how long a change waits for the rest of its burst (a
// deployment writes several files, or swaps a link and removes the old
// tree) before the files are read again.
const watchDebounce = 100 * time.Millisecond

// watch sends on the returned channel after each burst of changes to the
// source's directories, until ctx ends, when it closes the channel. It
// watches again after each burst, so that new directories and a swapped
// link are followed.
func watch(ctx context.Context, src source, log *slog.Logger) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	add := func() {
		for _, d := range src.watched() {
			w.Add(d) // a directory that does not exist (yet) is not watched
		}
	}
	add()
	changed := make(chan struct{}, 1)
	go func() {
		defer close(changed)
		defer w.Close()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				timer.Reset(watchDebounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("watching the rules for changes", "err", err)
			case <-timer.C:
				add()
				select {
				case changed <- struct{}{}:
				default: // one is pending already
				}
			}
		}
	}()
	return changed, nil
}
