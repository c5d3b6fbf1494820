package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Consumer is an empty module outside the repository, example.com/consumer,
// that reaches the repository's modules only as a user would: at their
// release version, through a module proxy made of the working tree.
type Consumer struct {
	Dir     string // the module's directory
	Version string // the release version
	Modules []Module
	g       *goTool
}

// NewConsumer checks the modules under root (Discover, Version,
// CheckWiring), builds their proxy in work/proxy and creates the consumer
// module in work/consumer, with the Go version of the root module. Every
// go command it runs, and its output, go to log. work should be empty and
// outside root.
func NewConsumer(ctx context.Context, root, work string, log io.Writer) (*Consumer, error) {
	mods, err := Discover(root)
	if err != nil {
		return nil, err
	}
	version, err := Version(mods)
	if err != nil {
		return nil, err
	}
	if err := CheckWiring(mods); err != nil {
		return nil, err
	}
	proxy := filepath.Join(work, "proxy")
	if err := BuildProxy(proxy, root, mods, version); err != nil {
		return nil, err
	}
	g, err := newGoTool(ctx, work, proxy, log)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "consumer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	goMod := fmt.Sprintf("module example.com/consumer\n\ngo %s\n", mods[0].File.Go.Version)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		return nil, err
	}
	return &Consumer{Dir: dir, Version: version, Modules: mods, g: g}, nil
}

// Go runs the go command in the consumer module and returns its standard
// output; the error carries its standard error.
func (c *Consumer) Go(args ...string) (string, error) { return c.g.run(c.Dir, args...) }

// Provider returns the module of the repository that provides the package
// with import path pkg: the one with the longest path that is a prefix of
// it.
func (c *Consumer) Provider(pkg string) (Module, bool) {
	var best Module
	found := false
	for _, m := range c.Modules {
		if (pkg == m.Path || strings.HasPrefix(pkg, m.Path+"/")) && len(m.Path) > len(best.Path) {
			best, found = m, true
		}
	}
	return best, found
}

// goTool runs the go command as a consumer outside the repository would,
// with every setting that could reach back into it or into the user's own
// module cache overridden.
type goTool struct {
	ctx context.Context
	env []string
	log io.Writer
}

func newGoTool(ctx context.Context, work, proxy string, log io.Writer) (*goTool, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "-json", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	var user struct{ GOMODCACHE, GOPROXY string }
	if err := json.Unmarshal(out, &user); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	// The proxy for released keyrate modules first, then the module cache
	// the repository's own builds filled (laid out as a proxy too), then
	// whatever the user reaches modules through.
	proxies := []string{fileURL(proxy)}
	if cached := filepath.Join(user.GOMODCACHE, "cache", "download"); user.GOMODCACHE != "" {
		if _, err := os.Stat(cached); err == nil {
			proxies = append(proxies, fileURL(cached))
		}
	}
	if user.GOPROXY != "" {
		proxies = append(proxies, user.GOPROXY)
	}
	set := map[string]string{
		"GOPROXY":     strings.Join(proxies, ","),
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath",
		"GO111MODULE": "on",
		"GOTOOLCHAIN": "local",
		// A fresh module cache, so that the not yet released versions never
		// reach the user's own; -trimpath keeps build cache hits across runs
		// although its path changes.
		"GOMODCACHE": filepath.Join(work, "modcache"),
		"GOBIN":      filepath.Join(work, "bin"),
		// The released versions exist only in the local proxy, so no
		// checksum database knows them; the rest come from the module cache,
		// checked when it was filled.
		"GOSUMDB":    "off",
		"GONOSUMDB":  "",
		"GOPRIVATE":  "",
		"GONOPROXY":  "",
		"GOINSECURE": "",
	}
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return &goTool{ctx: ctx, env: env, log: log}, nil
}

// run runs go with args in dir and returns its standard output.
func (g *goTool) run(dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(g.ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, g.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(g.log, "$ go %s\n%s%s", strings.Join(args, " "), stderr.String(), stdout.String())
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String(), nil
}

func fileURL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	abs = filepath.ToSlash(abs)
	if !strings.HasPrefix(abs, "/") {
		abs = "/" + abs // a Windows drive letter
	}
	return "file://" + abs
}
