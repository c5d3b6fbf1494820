package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jsonEvent is one line of go test -json.
func jsonEvent(action, pkg, name string) []byte {
	return fmt.Appendf(nil, `{"Time":"2026-01-01T00:00:00Z","Action":%q,"Package":%q,"Test":%q}`, action, pkg, name)
}

// A test is named once it has run a minute, once, the longest running
// first; one that ended is not, and one run again is followed anew. Lines
// that are no test's events change nothing.
func TestWatch(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	w := newWatch(time.Minute)
	a, b, c := test{"p/one", "TestA"}, test{"p/two", "TestB"}, test{"p/one", "TestC"}

	w.event(jsonEvent("start", "p/one", ""), at(0))
	w.event([]byte("== module p: ok in 3s"), at(0))
	w.event([]byte("{not json"), at(0))
	w.event(jsonEvent("run", a.pkg, a.name), at(0))
	w.event(jsonEvent("run", b.pkg, b.name), at(0))
	w.event(jsonEvent("run", c.pkg, c.name), at(30*time.Second))
	w.event(jsonEvent("output", c.pkg, c.name), at(40*time.Second))

	assert.Empty(t, w.due(at(59*time.Second)))
	assert.Equal(t, []test{a, b}, w.due(at(60*time.Second)))
	assert.Empty(t, w.due(at(61*time.Second)), "each is named once")
	w.event(jsonEvent("pass", c.pkg, c.name), at(80*time.Second))
	assert.Empty(t, w.due(at(2*time.Minute)), "TestC ended before its minute")

	w.event(jsonEvent("fail", a.pkg, a.name), at(3*time.Minute))
	w.event(jsonEvent("run", a.pkg, a.name), at(4*time.Minute))
	assert.Empty(t, w.due(at(4*time.Minute+59*time.Second)))
	assert.Equal(t, []test{a}, w.due(at(5*time.Minute)))
	assert.Equal(t, "!! still running after 1m0s: TestA (p/one)", string(notice(a, time.Minute)))
}

// chunked writes p to w in pieces of n bytes, as a pipe may deliver it.
func chunked(w io.Writer, p []byte, n int) {
	for len(p) > 0 {
		k := min(n, len(p))
		w.Write(p[:k])
		p = p[k:]
	}
}

// Lines of two streams written at once, in pieces smaller and larger than
// a line, come out whole, every one of them, each stream's in its order.
func TestStreamKeepsLinesWhole(t *testing.T) {
	var stdout bytes.Buffer
	o := &output{stdout: &stdout, stderr: io.Discard}
	w := newWatch(time.Minute)
	lines := func(tag string) []string {
		var l []string
		for i := range 50 {
			l = append(l, tag+fmt.Sprint(i)+strings.Repeat(tag, 100+i*997%5000))
		}
		return l
	}
	streams := [][]string{lines("a"), lines("b")}
	var wg sync.WaitGroup
	for i, s := range streams {
		r, pw := io.Pipe()
		wg.Go(func() { stream(r, o, w, time.Now) })
		wg.Go(func() {
			chunked(pw, []byte(strings.Join(s, "\n")), 7+i*4093) // the last line without a newline
			pw.Close()
		})
	}
	wg.Wait()

	got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, got, 100)
	var a, b []string
	for _, l := range got {
		switch l[0] {
		case 'a':
			a = append(a, l)
		case 'b':
			b = append(b, l)
		}
	}
	assert.Equal(t, streams[0], a)
	assert.Equal(t, streams[1], b)
}

// The first directory runs alone, before any other starts; the others run
// two at once, never more; and one failure fails the whole.
func TestSchedule(t *testing.T) {
	var (
		mu             sync.Mutex
		log            []string
		running, most  int
		bStarted       = make(chan struct{})
		cStarted       = make(chan struct{})
		closeOnStarted = map[string]chan struct{}{"b": bStarted, "c": cStarted}
	)
	run := func(dir string) bool {
		mu.Lock()
		log = append(log, "start "+dir)
		running++
		most = max(most, running)
		mu.Unlock()
		if ch := closeOnStarted[dir]; ch != nil {
			close(ch)
		}
		// b and c each wait for the other: they must run at once.
		wait := map[string]chan struct{}{"b": cStarted, "c": bStarted}[dir]
		if wait != nil {
			select {
			case <-wait:
			case <-time.After(10 * time.Second):
				t.Errorf("%s: the other of b and c never started alongside", dir)
			}
		}
		mu.Lock()
		log = append(log, "end "+dir)
		running--
		mu.Unlock()
		return dir != "d"
	}

	ok := schedule([]string{"a", "b", "c", "d", "e"}, 2, true, run)
	assert.False(t, ok, "d failed")
	require.GreaterOrEqual(t, len(log), 2)
	assert.Equal(t, []string{"start a", "end a"}, log[:2])
	assert.Equal(t, 2, most)
	assert.Len(t, log, 10)

	log, most = nil, 0
	assert.True(t, schedule([]string{"a", "e"}, 2, false, run))
	assert.Len(t, log, 4)
}

// A command's standard output comes line by line, its standard error in
// one piece after it, then how it ended; {} names the directory.
func TestRunOne(t *testing.T) {
	var stdout, stderr bytes.Buffer
	o := &output{stdout: &stdout, stderr: &stderr}
	w := newWatch(time.Minute)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return t0 }
	script := `echo "dir $1"; echo oops >&2; printf '%s\n' "$(printf '{"Action":"run","Package":"p","Test":"TestX"}')"; exit $2`

	ok := runOne("mod", []string{"sh", "-c", script, "sh", "{}", "3"}, o, w, clock)
	assert.False(t, ok)
	assert.Equal(t, "dir mod\n{\"Action\":\"run\",\"Package\":\"p\",\"Test\":\"TestX\"}\n== module mod: FAIL in 0s\n", stdout.String())
	assert.Equal(t, "oops\n", stderr.String())
	assert.Equal(t, []test{{"p", "TestX"}}, w.due(t0.Add(time.Minute)), "the events passed on are watched")

	stdout.Reset()
	stderr.Reset()
	assert.True(t, runOne("other", []string{"sh", "-c", script, "sh", "{}", "0"}, o, w, clock))
	assert.Contains(t, stdout.String(), "== module other: ok in 0s\n")

	stdout.Reset()
	stderr.Reset()
	assert.False(t, runOne("x", []string{"/nonexistent/program"}, o, w, clock))
	assert.Contains(t, stderr.String(), "testrun: x:")
	assert.Equal(t, "== module x: FAIL in 0s\n", stdout.String())
}
