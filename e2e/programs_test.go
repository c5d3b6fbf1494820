package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// build compiles the command in the repository directory dir (such as
// "cmd/keyrate-demo") into a temporary directory and returns its path.
// Each command is a module of its own: it is built in its directory, which
// works in the workspace and with GOWORK=off alike (the test runner's).
func build(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("..")
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
	return runDemo(t, build(t, "cmd/keyrate-demo"), flags...)
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

// startRedis runs a redis-server on a free loopback port, without
// persistence, until the test ends, and returns its address. Without
// redis-server the test skips with an install hint, and fails under
// KEYRATE_INTEGRATION=1.
func startRedis(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		const hint = "redis-server not found; install it with: apt-get install -y redis-server"
		if os.Getenv("KEYRATE_INTEGRATION") == "1" {
			t.Fatal(hint + " (required: KEYRATE_INTEGRATION=1)")
		}
		t.Skip(hint)
	}
	dir := t.TempDir()
	var last error
	for range 5 { // a free port may be taken before redis-server binds it
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--logfile", "redis.log", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if last = waitForPong(addr, exited); last == nil {
			t.Cleanup(stop)
			return addr
		}
		stop()
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		last = fmt.Errorf("%w; its log:\n%s", last, log)
	}
	t.Fatalf("redis-server did not start: %v", last)
	return ""
}

// waitForPong waits until the server at addr answers PING with PONG.
func waitForPong(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := ping(addr)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited", addr)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
