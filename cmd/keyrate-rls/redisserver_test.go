package main

// startRedis runs a throwaway redis-server for a test, as the development
// module's redisserver does: this module cannot import that one.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// startRedis runs a redis-server until t ends and returns its address. Without
// redis-server the test skips with an install hint, and fails instead when
// KEYRATE_INTEGRATION=1.
func startRedis(t testing.TB) string {
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
