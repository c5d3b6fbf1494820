package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// perMinute returns a configuration of one rule, n per minute per value
// of key k, and a rule on key other.
func perMinute(n string) string {
	return `
domain: d
descriptors:
  - key: other
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: ` + n + `}
`
}

// newReloader returns a reloader of h's service from a file holding
// config, already loaded.
func newReloader(t *testing.T, h *harness, config string) *reloader {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	rl := &reloader{src: fileSource{path: path}, svc: h.svc, metrics: h.m, log: slog.New(slog.NewTextHandler(h.log, nil))}
	write(t, path, config)
	if !rl.check() {
		t.Fatalf("the first check does not load:\n%s", h.log)
	}
	return rl
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A reload that changes a rule's limits keeps its counts; an invalid or
// unreadable file is logged once and changes nothing.
func TestReloadKeepsCounts(t *testing.T) {
	h := newHarness(t, perMinute("3"))
	rl := newReloader(t, h, perMinute("3"))
	r := request("d", desc("k", "x"))
	h.trace(t, []step{
		{0, r, "OK | OK 2/3 MINUTE t=1m0s"},
		{0, r, "OK | OK 1/3 MINUTE t=1m0s"},
	})

	write(t, rl.src.(fileSource).path, perMinute("5"))
	if !rl.check() {
		t.Fatalf("a changed file is not loaded:\n%s", h.log)
	}
	h.trace(t, []step{{0, r, "OK | OK 2/5 MINUTE t=1m0s"}})
	if rl.check() {
		t.Error("an unchanged file is loaded again")
	}

	invalid := perMinute("5") + "  - key: api_key\n    value: sk-secret\n  - key: api_key\n    value: sk-secret\n"
	write(t, rl.src.(fileSource).path, invalid)
	if rl.check() || rl.check() {
		t.Error("an invalid file is loaded")
	}
	log := h.log.String()
	if n := strings.Count(log, "invalid configuration"); n != 1 || !strings.Contains(log, "rules.yaml:10:") {
		t.Errorf("the invalid file is logged %d times, or without its line:\n%s", n, log)
	}
	if strings.Contains(log, "sk-secret") {
		t.Errorf("the log quotes a descriptor value:\n%s", log)
	}
	h.trace(t, []step{{0, r, "OK | OK 1/5 MINUTE t=1m0s"}})

	if err := os.Remove(rl.src.(fileSource).path); err != nil {
		t.Fatal(err)
	}
	if rl.check() || rl.check() {
		t.Error("a missing file is loaded")
	}
	if n := strings.Count(h.log.String(), "cannot read the configuration"); n != 1 {
		t.Errorf("the missing file is logged %d times, want once:\n%s", n, h.log)
	}
	h.trace(t, []step{{0, r, "OK | OK 0/5 MINUTE t=1m0s"}})
	if got := testutil.ToFloat64(h.m.configLoads.WithLabelValues("error")); got != 1 {
		t.Errorf("config_loads{error} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.configLoads.WithLabelValues("success")); got != 2 {
		t.Errorf("config_loads{success} = %v, want 2", got)
	}
}

// A rule taken out and put back keeps its tier, and so its counts; a new
// window for it counts the events it holds.
func TestReloadRuleBackAndWindow(t *testing.T) {
	h := newHarness(t, perMinute("3"))
	rl := newReloader(t, h, perMinute("3"))
	r := request("d", desc("k", "x"))
	h.trace(t, []step{{0, r, "OK | OK 2/3 MINUTE t=1m0s"}})

	write(t, rl.src.(fileSource).path, "domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	rl.check()
	h.trace(t, []step{{time.Second, r, "OK | OK"}})

	write(t, rl.src.(fileSource).path, perMinute("3"))
	rl.check()
	h.trace(t, []step{{2 * time.Second, r, "OK | OK 1/3 MINUTE t=58s"}})

	write(t, rl.src.(fileSource).path, strings.Replace(perMinute("3"), "unit: minute", "window: 2m", 1))
	rl.check()
	h.trace(t, []step{{3 * time.Second, r, "OK | OK 0/3 2xMINUTE t=1m57s"}})
}

// The reloader checks the file every interval and on a signal.
func TestReloaderRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, perMinute("3"))
		rl := newReloader(t, h, perMinute("3"))
		trigger := make(chan os.Signal)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			rl.run(ctx, 5*time.Second, trigger, nil)
		}()
		limit := func() int { r, _ := h.svc.rules.Load().match("d", desc("k", "x").Entries); return r.limits[0].perUnit }

		write(t, rl.src.(fileSource).path, perMinute("4"))
		time.Sleep(5*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := limit(); got != 3 {
			t.Fatalf("limit %d before the interval has passed, want 3", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := limit(); got != 4 {
			t.Fatalf("limit %d after the interval, want 4", got)
		}

		write(t, rl.src.(fileSource).path, perMinute("6"))
		trigger <- syscall.SIGHUP
		synctest.Wait()
		if got := limit(); got != 6 {
			t.Fatalf("limit %d after SIGHUP, want 6", got)
		}
		cancel()
		<-done
	})
}

// A rules file past maxRulesFile is refused without being read whole: the
// rules in force stay, and the error names the file and its size, not its
// content. So is a runtime directory whose files together pass
// maxRulesTotal; at start, such rules leave the service with none.
func TestRulesFileTooLarge(t *testing.T) {
	h := newHarness(t, perMinute("2"))
	rl := newReloader(t, h, perMinute("2"))
	path := rl.src.(fileSource).path
	// Valid YAML to the end, a comment holding a marker past the bound.
	big := perMinute("9") + "# " + strings.Repeat("x", maxRulesFile-len(perMinute("9"))-len("# \n")) + "\n#marker\n"
	write(t, path, big)
	if rl.check() {
		t.Fatal("a file past the bound loaded")
	}
	if got := h.ask(t, request("d", desc("k", "v"))); got != "OK | OK 1/2 MINUTE t=1m0s" {
		t.Errorf("after the large file: %s, want the rules in force", got)
	}
	log := h.log.String()
	for _, want := range []string{"invalid configuration; the rules in force stay", "rules.yaml: too large", "past the bound of 4194304"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "marker") || strings.Contains(log, "xxxx") {
		t.Error("the log quotes the file")
	}
	if got := testutil.ToFloat64(h.m.loadError); got != 1 {
		t.Errorf("config_load_error = %v, want 1", got)
	}
	if rl.check() || testutil.ToFloat64(h.m.loadError) != 1 {
		t.Error("the same large file is refused and counted once")
	}
	// Just at the bound, it loads.
	write(t, path, perMinute("9")+"# "+strings.Repeat("x", maxRulesFile-len(perMinute("9"))-len("# \n"))+"\n")
	if !rl.check() {
		t.Fatalf("a file at the bound does not load:\n%s", h.log)
	}

	// The files of a runtime directory, each within the bound, past it
	// together.
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range maxRulesTotal / maxRulesFile {
		doc := "domain: d" + string(rune('a'+i)) + "\ndescriptors: []\n"
		write(t, filepath.Join(dir, string(rune('a'+i))+".yaml"), doc+"# "+strings.Repeat("x", maxRulesFile-len(doc)-3)+"\n")
	}
	write(t, filepath.Join(dir, "z.yaml"), "domain: z\ndescriptors: []\n")
	rd := &reloader{src: runtimeDir{root: root, app: "config"}, metrics: h.m, log: h.svc.log}
	rs, invalid, err := rd.first()
	if err != nil || invalid == nil || !rs.none {
		t.Fatalf("first() = %v, %v, %v; want no rules and why", rs, invalid, err)
	}
	if !strings.Contains(invalid.Error(), "z.yaml: too large") || !strings.Contains(invalid.Error(), "together") {
		t.Errorf("the error: %v", invalid)
	}
}
