package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

// build compiles the command in the repository directory dir (such as
// "dev/cmd/keyrate-demo") into a temporary directory and returns its path.
// It is built in its directory, within its own module, which works in the
// workspace and with GOWORK=off alike (the test command's).
func build(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build %s with: %v", dir, err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, filepath.FromSlash(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", dir, err, out)
	}
	return bin
}

// startDemo builds the demo, starts it on a free loopback port with the
// extra flags given and returns its base URL. It is stopped when the test
// ends, and its output shown if the test failed.
func startDemo(t *testing.T, flags ...string) string {
	t.Helper()
	return runDemo(t, build(t, "dev/cmd/keyrate-demo"), flags...)
}

// runDemo starts the demo binary bin as startDemo does.
func runDemo(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	first := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			select {
			case first <- lines.Text():
			default:
			}
			logMu.Lock()
			log.WriteString(lines.Text() + "\n")
			logMu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			logMu.Lock()
			t.Logf("demo %v output:\n%s", flags, log.String())
			logMu.Unlock()
		}
	})

	select {
	case line := <-first:
		base, ok := strings.CutPrefix(line, "keyrate-demo listening on ")
		if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") {
			t.Fatalf("demo's first line %q does not give a loopback address", line)
		}
		return base
	case err := <-exited:
		t.Fatalf("demo exited before listening: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not print its address within 60 s")
	}
	return ""
}

// startRedis runs a redis-server on a free loopback port until the test
// ends and returns its address (see redistest.StartT).
func startRedis(t *testing.T) string { return redistest.StartT(t).Addr() }
