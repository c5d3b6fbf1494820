package readme

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// cloneDir is the directory the root README's replace lines name the clone
// by, relative to the module that uses them.
const cloneDir = "../keyrate"

// replaceBlock returns the replace block of the README's go.mod example.
func replaceBlock(t *testing.T, readme string) string {
	block := regexp.MustCompile("(?s)```go\\.mod\n(replace \\(\n.*?\n\\)\n)```").FindStringSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no ```go.mod block of replace lines for a module outside the clone")
	}
	return block[1]
}

// modules returns the module path of every go.mod under root but dev's,
// which is never published, by its directory relative to root.
func modules(t *testing.T, root string) map[string]string {
	mods := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil || rel == "dev" {
			return err
		}
		data, err := os.ReadFile(p)
		if err == nil {
			mods[filepath.ToSlash(rel)] = modfile.ModulePath(data)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// proxyDown matches what the go command says when it cannot reach a
// module proxy.
var proxyDown = regexp.MustCompile(`dial tcp|no such host|connection refused|i/o timeout|TLS handshake timeout|network is unreachable|module lookup disabled by GOPROXY=off`)

// TestReplaceLinesBuildOutsideTheClone builds, in a module of its own
// outside the repository, an import of every library module, every
// package of every module, and every command as a tool, wired to this checkout by nothing but the root
// README's replace lines (the clone beside the module, as the README puts
// it), with GOWORK=off, GOFLAGS=-mod=mod and the environment's GOPROXY for
// everything else. The README's lines must name every published module.
// It skips when the module proxy cannot be reached, and fails then too
// under KEYRATE_INTEGRATION=1.
func TestReplaceLinesBuildOutsideTheClone(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := replaceBlock(t, string(readme))
	f, err := modfile.Parse("go.mod", []byte("module example.com/app\n"+block), nil)
	if err != nil {
		t.Fatalf("README.md's replace lines: %v", err)
	}
	replaced := map[string]string{}
	for _, r := range f.Replace {
		replaced[r.Old.Path] = r.New.Path
	}
	var imports, tools []string
	for dir, path := range modules(t, root) {
		want := cloneDir
		if dir != "." {
			want += "/" + dir
		}
		if got, ok := replaced[path]; !ok || got != want {
			t.Errorf("README.md's replace lines map %s to %q, want %s", path, got, want)
		}
		if strings.HasPrefix(dir, "cmd/") {
			tools = append(tools, path)
		} else {
			imports = append(imports, path)
		}
	}
	if t.Failed() {
		return
	}
	slices.Sort(imports)
	slices.Sort(tools)

	base := t.TempDir()
	if err := os.Symlink(root, filepath.Join(base, filepath.Base(cloneDir))); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(base, "app")
	var main bytes.Buffer
	main.WriteString("package main\n\nimport (\n")
	for _, p := range imports {
		main.WriteString("\t_ \"" + p + "\"\n")
	}
	main.WriteString(")\n\nfunc main() {}\n")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), main.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	goCmd := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = app, env
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if proxyDown.Match(out) && os.Getenv("KEYRATE_INTEGRATION") != "1" {
			t.Skipf("the module proxy cannot be reached (go %s: %s); KEYRATE_INTEGRATION=1 makes this a failure", strings.Join(args, " "), out)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	goCmd("mod", "init", "example.com/app")
	goMod, err := os.OpenFile(filepath.Join(app, "go.mod"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = goMod.WriteString("\n" + block)
		err = errors.Join(err, goMod.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	edit := []string{"mod", "edit"}
	for _, p := range tools {
		edit = append(edit, "-tool="+p)
	}
	goCmd(edit...)
	goCmd("mod", "tidy")
	goCmd("build", "./...", "github.com/keyrate/keyrate/...") // every package of every module
	goCmd("build", "-o", t.TempDir()+string(filepath.Separator), "tool")
}
