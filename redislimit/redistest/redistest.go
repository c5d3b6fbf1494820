// Package redistest starts and stops real redis-server processes for the
// tests and benchmarks of every keyrate module, on free loopback ports in
// temporary directories: single servers, one shared by a whole test binary
// (Main), and three-master Redis Clusters joined with redis-cli. It also
// counts the round trips a go-redis client makes, and reads the CPU time a
// server has used.
//
// When redis-server (or, for a Cluster, redis-cli) is not on PATH, tests
// that need it skip with a message saying how to install it, and fail
// instead when KEYRATE_INTEGRATION=1 is set, so that CI can never pass by
// skipping them.
//
// It is public so that the modules that require the Redis backend (the
// development module, keyrate-rls) start their servers the same way; it is
// for tests, not for production code.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// InstallHint says how to get redis-server when it is missing.
const InstallHint = "redis-server is not on PATH; install it (Debian/Ubuntu: apt-get install -y redis-server; macOS: brew install redis) to run the Redis tests"

// IntegrationEnv names the environment variable that, set to 1, turns a
// missing redis-server from a skip into a failure.
const IntegrationEnv = "KEYRATE_INTEGRATION"

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 15 * time.Second

// Server is one redis-server process bound to 127.0.0.1.
type Server struct {
	path string
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// Start runs redis-server on a free loopback port with dir as its working
// directory, without persistence unless extra arguments (redis-server
// command-line options such as "--appendonly", "yes") turn it on, and waits
// until it answers PING.
func Start(dir string, extra ...string) (*Server, error) {
	return startOn(dir, freePort, extra...)
}

// startOn is Start with the port picked by pick.
func startOn(dir string, pick func() (int, error), extra ...string) (*Server, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(InstallHint)
	}
	var lastErr error
	for range 5 { // a free port can be taken before redis binds it; try another
		port, err := pick()
		if err != nil {
			return nil, err
		}
		s := &Server{path: path, dir: dir, port: port, args: extra}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", "redis.log",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.path, args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.done)

	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("redistest: redis-server exited during start on port %d: %s", s.port, s.logTail())
		default:
		}
		if ping(s.Addr()) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redistest: redis-server on port %d did not answer PING within %v: %s", s.port, startTimeout, s.logTail())
}

// ping sends one PING over a fresh connection and expects +PONG (a server
// still loading its data answers -LOADING instead).
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
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redistest: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return "(no log)"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop asks the server to shut down (SIGTERM, which flushes an append-only
// file if one is on) and waits for it to exit, killing it after 10s.
// Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	return s.signal(syscall.SIGTERM, 10*time.Second)
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for it
// to exit.
func (s *Server) Kill() error {
	return s.signal(syscall.SIGKILL, 10*time.Second)
}

// Pause stops the server's process (SIGSTOP), as a hung host or a long
// pause of its machine would: connections stay open and new ones are
// accepted by the kernel, but nothing is answered until Resume.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT); it answers what was
// sent meanwhile.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal, wait time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if sig != syscall.SIGKILL {
		// A paused server would hold the signal until it runs again.
		s.cmd.Process.Signal(syscall.SIGCONT)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(wait):
		s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("redistest: redis-server did not exit within %v of %v", wait, sig)
	}
}

// Restart starts a stopped or killed server again on the same port and
// directory, with the same arguments, so that it finds whatever it
// persisted there.
func (s *Server) Restart() error {
	select {
	case <-s.done:
	default:
		return errors.New("redistest: restart of a running server")
	}
	return s.start()
}

// Missing reports, for a test that cannot get a server, whether to skip or
// fail: it fails tb when KEYRATE_INTEGRATION=1 and skips it otherwise.
func Missing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv(IntegrationEnv) == "1" {
		tb.Fatalf("%v (%s=1: the Redis tests must run)", err, IntegrationEnv)
	}
	tb.Skip(err)
}

// StartT starts a server for one test in tb.TempDir and stops it when the
// test ends. It skips or fails tb (see Missing) when redis-server is not on
// PATH.
func StartT(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Missing(tb, errors.New(InstallHint))
	}
	s, err := Start(tb.TempDir(), extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}

var (
	shared    *Server
	sharedErr error
)

// Main is for a TestMain: it starts one server for the whole test binary,
// runs the tests, examples and benchmarks, stops the server and returns the
// exit code. Tests reach the server with Shared, examples with SharedAddr.
// When redis-server is missing it runs the tests anyway (each then skips)
// and skips the examples (every runnable example of a package that uses
// Main needs the server; a -skip given on the command line is kept as it
// is), unless KEYRATE_INTEGRATION=1, when it returns 1 at once.
func Main(m *testing.M) int {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(IntegrationEnv) == "1" {
			fmt.Fprintf(os.Stderr, "%s (%s=1: the Redis tests must run)\n", InstallHint, IntegrationEnv)
			return 1
		}
		sharedErr = errors.New(InstallHint)
		if !flag.Parsed() {
			flag.Parse()
		}
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
			fmt.Fprintf(os.Stderr, "%s: skipping the examples\n", InstallHint)
			f.Value.Set("^Example")
		}
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if shared, err = Start(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.Stop()
	return m.Run()
}

// Shared returns the server Main started, skipping or failing tb (see
// Missing) when there is none.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	if shared == nil {
		err := sharedErr
		if err == nil {
			err = errors.New("redistest: Shared needs a TestMain that calls redistest.Main")
		}
		Missing(tb, err)
	}
	return shared
}

// SharedAddr returns the address of the server Main started, for
// examples, which have no testing.TB to skip: Main skips them when there is
// no server.
func SharedAddr() string {
	if shared == nil {
		return ""
	}
	return shared.Addr()
}

// Client returns a go-redis client for s, closed when tb ends. It turns
// ContextTimeoutEnabled on, as the redislimit package recommends, and keeps
// go-redis's other defaults.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// RoundTrips is a go-redis hook that counts round trips: each command sent
// on its own is one, and so is each pipeline. The handshake go-redis sends
// on every new connection (HELLO, CLIENT SETINFO, CLIENT
// MAINT_NOTIFICATIONS, AUTH, SELECT) is left out, being a cost of the pool,
// not of any decision. Add it with AddHook.
type RoundTrips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (r *RoundTrips) Load() int64 { return r.n.Load() }

// DialHook passes dials through uncounted.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one round trip per command.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isHandshake(cmd) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one round trip per pipeline.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !isHandshake(c) {
				r.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func isHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "readonly":
		return true
	case "client":
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		sub := fmt.Sprint(args[1])
		return strings.EqualFold(sub, "setinfo") || strings.EqualFold(sub, "maint_notifications")
	}
	return false
}
