package redistest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate/redislimit/redistest"
)

// childEnv marks a copy of this test binary that TestMissing runs without
// redis-server on its PATH: "plain" runs its tests without Main.
const childEnv = "REDISTEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "plain" {
		os.Exit(m.Run())
	}
	os.Exit(redistest.Main(m))
}

// The server Main started answers every test of the binary, at the
// address examples get.
func TestShared(t *testing.T) {
	s := redistest.Shared(t)
	assert.Equal(t, s.Addr(), redistest.SharedAddr())
	require.NoError(t, s.Client(t).Ping(context.Background()).Err())
}

// A server of one test listens on loopback, keeps what it is sent, and
// is gone once stopped; a second Stop does nothing.
func TestStartT(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t)
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", c.Get(ctx, "k").Val())

	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop())
	assert.Error(t, c.Ping(ctx).Err())
}

// A server stopped with its append-only file on finds its data again when
// restarted on the same port; a killed one answers again after Restart.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t, "--appendonly", "yes")
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "kept", 0).Err())
	require.Error(t, s.Restart(), "a running server cannot be restarted")

	require.NoError(t, s.Stop())
	require.NoError(t, s.Restart())
	assert.Equal(t, "kept", c.Get(ctx, "k").Val())

	require.NoError(t, s.Kill())
	assert.Error(t, c.Ping(ctx).Err())
	require.NoError(t, s.Restart())
	require.NoError(t, c.Ping(ctx).Err())
}

// A paused server answers nothing until it resumes, then answers.
func TestPause(t *testing.T) {
	ctx := context.Background()
	s := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(ctx).Err())

	require.NoError(t, s.Pause())
	err := c.Ping(ctx).Err()
	var netErr interface{ Timeout() bool }
	require.ErrorAs(t, err, &netErr)
	assert.True(t, netErr.Timeout(), "%v", err)

	require.NoError(t, s.Resume())
	require.NoError(t, c.Ping(ctx).Err())
}

// A Cluster is three masters that split the 16,384 slots among them, each
// on loopback, all agreeing that the cluster is ok.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartClusterT(t)
	addrs := cl.Addrs()
	require.Len(t, addrs, 3)

	slots, err := cl.Client(t).ClusterSlots(ctx).Result()
	require.NoError(t, err)
	covered, masters := 0, map[string]bool{}
	for _, r := range slots {
		covered += int(r.End-r.Start) + 1
		masters[r.Nodes[0].Addr] = true
	}
	assert.Equal(t, 16384, covered)
	assert.Len(t, masters, 3)
	for _, a := range addrs {
		assert.True(t, masters[a], "%s serves no slot", a)
	}

	// Keys of distinct slots land on distinct nodes and are read back.
	c := cl.Client(t)
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}"} {
		require.NoError(t, c.Set(ctx, k, k, 0).Err())
		assert.Equal(t, k, c.Get(ctx, k).Val())
	}
}

// A command is one round trip, and so is a pipeline of several; the
// handshake of a new connection is none.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartT(t).Client(t)
	var rt redistest.RoundTrips
	c.AddHook(&rt)

	require.NoError(t, c.Ping(ctx).Err())
	assert.EqualValues(t, 1, rt.Load())
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "a", 1, 0)
		p.Incr(ctx, "a")
		p.Get(ctx, "a")
		return nil
	})
	require.NoError(t, err)
	assert.EqualValues(t, 2, rt.Load())
}

// ServerCPU reads a positive CPU time that does not go back over work.
func TestServerCPU(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartT(t).Client(t)
	before := redistest.ServerCPU(t, c)
	for i := range 1000 {
		require.NoError(t, c.Set(ctx, "k", i, 0).Err())
	}
	after := redistest.ServerCPU(t, c)
	assert.Positive(t, after)
	assert.GreaterOrEqual(t, after, before)
}

// Without redis-server on PATH a test skips, naming how to install it,
// and fails instead under KEYRATE_INTEGRATION=1; a binary whose TestMain
// calls Main runs its tests (each of them skipping) or, under
// KEYRATE_INTEGRATION=1, fails at once.
func TestMissing(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("a child runs only the tests named to it")
	}
	run := func(child string, integration bool, tests string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^("+tests+")$", "-test.v")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir(), childEnv+"="+child, redistest.IntegrationEnv+"=")
		if integration {
			cmd.Env = append(cmd.Env, redistest.IntegrationEnv+"=1")
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	for _, child := range []string{"plain", "main"} {
		out, err := run(child, false, "TestShared|TestStartT|TestCluster")
		require.NoError(t, err, out)
		for _, test := range []string{"TestShared", "TestStartT", "TestCluster"} {
			assert.Contains(t, out, "--- SKIP: "+test, child)
		}
		assert.Contains(t, out, redistest.InstallHint)
		assert.Contains(t, out, redistest.ClusterInstallHint)
	}

	for _, test := range []string{"TestStartT", "TestCluster"} {
		out, err := run("plain", true, test)
		require.Error(t, err, out)
		assert.Contains(t, out, "--- FAIL: "+test)
		assert.Contains(t, out, redistest.IntegrationEnv+"=1")
	}
	out, err := run("main", true, "TestStartT")
	require.Error(t, err, out)
	assert.Contains(t, out, redistest.InstallHint+" ("+redistest.IntegrationEnv+"=1")
	assert.NotContains(t, out, "=== RUN", "Main runs no test without the server it must start")
}
