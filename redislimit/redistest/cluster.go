package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterInstallHint says how to get what a Cluster needs when it is
// missing.
const ClusterInstallHint = "redis-server and redis-cli are needed to start a Redis Cluster; install them (Debian/Ubuntu: apt-get install -y redis-server, which brings redis-tools; macOS: brew install redis)"

// clusterTimeout bounds how long a new cluster may take to agree on its
// slots.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of three masters and no replicas, each a
// redis-server bound to 127.0.0.1 in a directory of its own.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts three redis-server processes in cluster mode in
// subdirectories of dir, joins them with redis-cli --cluster create (which
// splits the 16,384 slots among them) and waits until every node reports
// cluster_state:ok.
func StartCluster(dir string) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errors.New(ClusterInstallHint)
	}
	c := &Cluster{}
	for i := range 3 {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		s, err := startOn(nodeDir, busPort,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// busPort picks a free port whose cluster bus port (the port + 10000, as
// redis-server derives it) is free too.
func busPort() (int, error) {
	for range 100 {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		if port+10000 > 65535 {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		ln.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port with a free cluster bus port")
}

// waitOK polls CLUSTER INFO on every node until each reports the cluster
// ok, with all three nodes known.
func (c *Cluster) waitOK(ctx context.Context) error {
	var last string
	for _, s := range c.nodes {
		client := redis.NewClient(&redis.Options{Addr: s.Addr()})
		for {
			info, err := client.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			last = fmt.Sprint(info, err)
			select {
			case <-ctx.Done():
				client.Close()
				return fmt.Errorf("redistest: cluster not ok within %v; node %s says: %s", clusterTimeout, s.Addr(), last)
			case <-time.After(20 * time.Millisecond):
			}
		}
		client.Close()
	}
	return nil
}

// Addrs returns the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Stop stops every node and waits for them to exit.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.nodes {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// StartClusterT starts a cluster for one test in tb.TempDir and stops it
// when the test ends. It skips or fails tb (see Missing) when redis-server
// or redis-cli is not on PATH.
func StartClusterT(tb testing.TB) *Cluster {
	tb.Helper()
	for _, prog := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(prog); err != nil {
			Missing(tb, errors.New(ClusterInstallHint))
		}
	}
	c, err := StartCluster(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Stop() })
	return c
}

// Client returns a go-redis cluster client for c, closed when tb ends, with
// ContextTimeoutEnabled on, as for Server.Client.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { client.Close() })
	return client
}
