package release

import (
	"archive/zip"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

func zipNames(t *testing.T, name string) []string {
	t.Helper()
	r, err := zip.OpenReader(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, f := range r.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}

func TestBuildProxyLaysOutModulesAsTheGoCommandReadsThem(t *testing.T) {
	for _, vcs := range []bool{true, false} {
		name := "git checkout"
		if !vcs {
			name = "plain directory"
		}
		t.Run(name, func(t *testing.T) {
			files := wired()
			files["window.go"] = "package repo\n"
			files["store/redis.go"] = "package store\n"
			files["store/bench/bench.go"] = "package bench\n"
			files[".gitignore"] = "/built-binary\n"
			files["built-binary"] = "not source"
			root := writeTree(t, files)
			if vcs {
				if _, err := exec.LookPath("git"); err != nil {
					const hint = "git not found; install it with: apt-get install -y git"
					if os.Getenv("KEYRATE_INTEGRATION") == "1" {
						t.Fatal(hint + " (required: KEYRATE_INTEGRATION=1)")
					}
					t.Skip(hint)
				}
				if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
					t.Fatalf("git init: %v\n%s", err, out)
				}
			}
			mods, err := Discover(root)
			if err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			if err := BuildProxy(dst, root, mods, "v0.1.0"); err != nil {
				t.Fatal(err)
			}

			dir := filepath.Join(dst, "example.com", "repo", "@v")
			got := zipNames(t, filepath.Join(dir, "v0.1.0.zip"))
			// The root module: its own files, none of a nested module's.
			want := []string{
				"example.com/repo@v0.1.0/.gitignore",
				"example.com/repo@v0.1.0/go.mod",
				"example.com/repo@v0.1.0/window.go",
			}
			if !vcs {
				// Outside git nothing says the binary is ignored.
				want = []string{
					"example.com/repo@v0.1.0/.gitignore",
					"example.com/repo@v0.1.0/built-binary",
					"example.com/repo@v0.1.0/go.mod",
					"example.com/repo@v0.1.0/window.go",
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("root zip holds %q, want %q", got, want)
			}
			store := filepath.Join(dst, "example.com", "repo", "store", "@v")
			if got, want := zipNames(t, filepath.Join(store, "v0.1.0.zip")), []string{
				"example.com/repo/store@v0.1.0/go.mod",
				"example.com/repo/store@v0.1.0/redis.go",
			}; !slices.Equal(got, want) {
				t.Errorf("store zip holds %q, want %q", got, want)
			}

			mod, err := os.ReadFile(filepath.Join(store, "v0.1.0.mod"))
			if err != nil || string(mod) != files["store/go.mod"] {
				t.Errorf("store v0.1.0.mod = %q, %v; want the module's go.mod", mod, err)
			}
			list, err := os.ReadFile(filepath.Join(store, "list"))
			if err != nil || string(list) != "v0.1.0\n" {
				t.Errorf("store list = %q, %v", list, err)
			}
			var info struct{ Version string }
			data, err := os.ReadFile(filepath.Join(store, "v0.1.0.info"))
			if err != nil || json.Unmarshal(data, &info) != nil || info.Version != "v0.1.0" {
				t.Errorf("store v0.1.0.info = %s, %v", data, err)
			}
		})
	}
}
