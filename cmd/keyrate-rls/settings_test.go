package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envOf returns an env of the given NAME=value pairs.
func envOf(kv ...string) env {
	m := map[string]string{}
	for _, s := range kv {
		name, value, _ := strings.Cut(s, "=")
		m[name] = value
	}
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// envoyproxy/ratelimit's environment sets the service up as it sets up
// that one, and the flags win over it.
func TestEnvironment(t *testing.T) {
	o, err := parseOptions(nil, envOf(
		"HOST=127.0.0.2", "PORT=9000", "GRPC_PORT=9001", "DEBUG_PORT=9002",
		"RUNTIME_ROOT=/rt", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
		"LOG_LEVEL=warning", "LOG_FORMAT=json", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:9100",
		"SHADOW_MODE=true", "QUOTA_MODE=true", "RESPONSE_DYNAMIC_METADATA=true", "MERGE_DOMAIN_CONFIG=true",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_RESET_HEADER=X-Reset",
		"NEAR_LIMIT_RATIO=0.5", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"GRPC_MAX_CONNECTION_AGE=1h", "GRPC_MAX_CONNECTION_AGE_GRACE=5m",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=10.0.0.1:6379", "REDIS_POOL_SIZE=7", "REDIS_AUTH=user:secret",
		"REDIS_TIMEOUT=2s", "CACHE_KEY_PREFIX=rl:", "LOCAL_CACHE_SIZE_IN_BYTES=0",
	), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.2:9000", o.httpAddr)
	assert.Equal(t, ":9001", o.grpcAddr)
	assert.Equal(t, "127.0.0.1:9002", o.debugAddr, "DEBUG_PORT alone: loopback")
	assert.Equal(t, runtimeDir{root: "/rt", sub: "ratelimit", app: "config", ignoreDotFiles: true}, o.source())
	assert.Equal(t, "warn", o.logLevel)
	assert.True(t, o.logJSON)
	assert.Equal(t, ":9100", o.promAddr)
	assert.Equal(t, "/metrics", o.promPath)
	assert.True(t, o.service.shadow && o.service.quota && o.service.dynamicMetadata && o.merge && o.healthyWithConfig)
	assert.Equal(t, responseHeaders{limit: "RateLimit-Limit", remaining: "RateLimit-Remaining", reset: "X-Reset"}, o.service.headers)
	assert.Equal(t, 0.5, o.nearRatio)
	assert.Equal(t, time.Hour, o.grpc.maxAge)
	assert.Equal(t, 5*time.Minute, o.grpc.maxAgeGrace)
	require.NotNil(t, o.redis)
	assert.Equal(t, "10.0.0.1:6379", o.redis.addr)
	assert.Equal(t, redisConn{network: "tcp", poolSize: 7, username: "user", password: "secret"}, o.redis.conn)
	assert.Equal(t, 2*time.Second, o.redis.timeout)
	assert.Equal(t, "rl:", o.redis.prefix)
	assert.Equal(t, 0, o.redis.denyCache)
	assert.Empty(t, o.warnings)

	// Flags win.
	o, err = parseOptions([]string{"-grpc", "127.0.0.1:7", "-log-level", "debug", "-redis", "10.0.0.9:6379", "-config", "rules.yaml"},
		envOf("GRPC_PORT=9001", "LOG_LEVEL=error", "REDIS_URL=10.0.0.1:6379", "RUNTIME_ROOT=/rt"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:7", o.grpcAddr)
	assert.Equal(t, "debug", o.logLevel)
	assert.Equal(t, "10.0.0.9:6379", o.redis.addr)
	assert.Equal(t, fileSource{path: "rules.yaml"}, o.source())

	// The defaults: envoyproxy/ratelimit's runtime directory, budgets in
	// process, and a Redis budget that waits as long as its caller.
	o, err = parseOptions(nil, envOf(), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, runtimeDir{root: "/srv/runtime_data/current", app: "config"}, o.source())
	assert.Nil(t, o.redis)
	o, err = parseOptions(nil, envOf("REDIS_URL=/var/run/redis.sock"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, defaultRedisTimeout, o.redis.timeout)
	assert.Equal(t, "unix", o.redis.conn.network, "a path is a socket")
}

// REDIS_TYPE chooses a server, a Cluster or Sentinel, as
// envoyproxy/ratelimit reads REDIS_URL for each.
func TestEnvironmentRedisTypes(t *testing.T) {
	o, err := parseOptions(nil, envOf("REDIS_TYPE=cluster", "REDIS_URL=a:1,b:2"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2"}, o.redis.cluster)
	o, err = parseOptions(nil, envOf("REDIS_TYPE=SENTINEL", "REDIS_URL=primary,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH=pw"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, redisConn{sentinelMaster: "primary", sentinels: []string{"s1:26379", "s2:26379"}, sentinelPassword: "pw", poolSize: 10}, o.redis.conn)
	o, err = parseOptions(nil, envOf("BACKEND_TYPE=redis", "REDIS_URL=redis://u:pw@h:6380"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "h:6380", o.redis.addr)
	assert.Equal(t, "pw", o.redis.conn.password)
}

// A setting that would be unsafe to go on without is refused; one that
// only asks for something keyrate-rls does not do is named in a warning.
func TestEnvironmentNotHonoured(t *testing.T) {
	for _, c := range []struct {
		env  string
		want string
	}{
		{"BACKEND_TYPE=memcache", "BACKEND_TYPE is memcache"},
		{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_USE_TLS is true"},
		{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_TYPE is \"GRPC_XDS_SOTW\""},
		{"REDIS_URL=a:1,b:2", "REDIS_TYPE=CLUSTER"},
		{"LOG_LEVEL=loud", "LOG_LEVEL is \"loud\""},
		{"PORT=http", "PORT is \"http\""},
		{"SHADOW_MODE=perhaps", "SHADOW_MODE is \"perhaps\""},
	} {
		_, err := parseOptions(nil, envOf(c.env), io.Discard)
		if assert.Error(t, err, c.env) {
			assert.Contains(t, err.Error(), c.want, c.env)
		}
	}
	o, err := parseOptions(nil, envOf("USE_STATSD=true", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false",
		"REDIS_URL=h:1", "REDIS_PERSECOND=true", "REDIS_PIPELINE_WINDOW=150us", "TRACING_ENABLED=true",
		"PROMETHEUS_MAPPER_YAML=/m.yaml", "LOCAL_CACHE_SIZE_IN_BYTES=1000000"), io.Discard)
	require.NoError(t, err)
	var names []string
	for _, w := range o.warnings {
		names = append(names, strings.Fields(w)[0])
	}
	assert.ElementsMatch(t, []string{"USE_STATSD", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "REDIS_PERSECOND",
		"REDIS_PIPELINE_WINDOW", "TRACING_ENABLED", "PROMETHEUS_MAPPER_YAML", "LOCAL_CACHE_SIZE_IN_BYTES"}, names)
}

// The runtime directory's files are read at any depth, a symbolic link to
// a directory not followed, dot files skipped with RUNTIME_IGNOREDOTFILES;
// each file holds its own domain, and two files of one domain are an
// error unless MERGE_DOMAIN_CONFIG merges them.
func TestRuntimeDirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "current")
	dir := filepath.Join(root, "config")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "nested"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "..2026_01_01"), 0o755))
	one := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	two := "domain: two\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
	write(t, filepath.Join(dir, "one.yaml"), one)
	write(t, filepath.Join(dir, "nested", "two.yaml"), two)
	write(t, filepath.Join(dir, "..2026_01_01", "one.yaml"), one) // a ConfigMap's versions
	require.NoError(t, os.Symlink("..2026_01_01", filepath.Join(dir, "..data")))

	rt := runtimeDir{root: root, app: "config", ignoreDotFiles: true}
	files, err := rt.read()
	require.NoError(t, err)
	require.Len(t, files, 2)
	assert.Equal(t, filepath.Join(dir, "nested", "two.yaml"), files[0].name)
	assert.Equal(t, filepath.Join(dir, "one.yaml"), files[1].name)
	rs, err := parseFiles(files, false)
	require.NoError(t, err)
	assert.Len(t, rs.domains, 2)

	// Without RUNTIME_IGNOREDOTFILES the versions' copy is read too, as
	// envoyproxy/ratelimit reads it, and its domain is given twice.
	rt.ignoreDotFiles = false
	files, err = rt.read()
	require.NoError(t, err)
	_, err = parseFiles(files, false)
	require.ErrorContains(t, err, `domain "one" is given twice (first at `+filepath.Join(dir, "..2026_01_01", "one.yaml"))

	more := "domain: one\ndescriptors:\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 3}\n"
	rs, err = parseFiles([]configFile{{"a.yaml", []byte(one)}, {"b.yaml", []byte(more)}}, true)
	require.NoError(t, err)
	r, _ := rs.match("one", desc("c", "x").Entries)
	require.NotNil(t, r)
	assert.Equal(t, 3, r.limits[0].perUnit)
	_, err = parseFiles([]configFile{{"a.yaml", []byte(one)}, {"b.yaml", []byte(one)}}, true)
	assert.ErrorContains(t, err, `b.yaml:3: descriptor: key "a" with the same value is given twice at this level (first at a.yaml:3)`)

	// An empty directory is no rules; a missing one is refused at start.
	empty := runtimeDir{root: t.TempDir(), app: "."}
	files, err = empty.read()
	require.NoError(t, err)
	rs, err = parseFiles(files, false)
	require.NoError(t, err)
	assert.Empty(t, rs.domains)
	assert.ErrorContains(t, checkSource(runtimeDir{root: "/nonexistent", app: "config"}), "runtime directory /nonexistent/config does not exist")
}

// The debug server serves pprof and the rules: DEBUG_PORT alone binds it
// to loopback; DEBUG_HOST chooses another address.
func TestDebugServerLoopbackByDefault(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"DEBUG_PORT=6071"}, "127.0.0.1:6071"},
		{[]string{"DEBUG_HOST=0.0.0.0", "DEBUG_PORT=6071"}, "0.0.0.0:6071"},
		{[]string{"DEBUG_HOST=10.0.0.3"}, "10.0.0.3:6070"},
		{nil, ""},
	} {
		o, err := parseOptions(nil, envOf(c.env...), io.Discard)
		require.NoError(t, err)
		assert.Equal(t, c.want, o.debugAddr, "%q", c.env)
	}
}

// The HTTP server listens on :8082 by default, beside the demo's 8080;
// PORT=8080 gives envoyproxy/ratelimit's port back, and HOST alone keeps
// the default port.
func TestDefaultHTTPAddr(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, ":8082"},
		{[]string{"PORT=8080"}, ":8080"},
		{[]string{"HOST=127.0.0.1"}, "127.0.0.1:8082"},
	} {
		o, err := parseOptions(nil, envOf(c.env...), io.Discard)
		require.NoError(t, err)
		assert.Equal(t, c.want, o.httpAddr, "environment %q", c.env)
		assert.Equal(t, ":8081", o.grpcAddr, "environment %q", c.env)
	}
}
