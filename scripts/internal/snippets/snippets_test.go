package snippets

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/keyrate/keyrate/scripts/internal/release"
)

const doc = "# Title\n" + // line 1
	"\n" +
	"```go\n" + // 3
	"x := 1\n" + // 4
	"```\n" +
	"\n" +
	"```sh\n" + // 7
	"go run .\n" +
	"```\n" +
	"1. a list item\n" + // 10
	"   ````go title\n" + // 11
	"   func f() {}\n" + // 12
	"   ````\n" +
	"~~~go\n" + // 14
	"// not compiled: a sketch\n" + // 15
	"~~~\n" +
	"    ```go\n" + // 17: indented code, not a fence
	"```gopher\n" + // 18
	"y\n" +
	"```\n"

func TestExtract(t *testing.T) {
	got := Extract("doc.md", []byte(doc))
	want := []Snippet{
		{"doc.md", 4, "x := 1\n"},
		{"doc.md", 12, "func f() {}\n"},
		{"doc.md", 15, "// not compiled: a sketch\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Extract =\n%+v\nwant\n%+v", got, want)
	}
	if got[0].Skipped() || !got[2].Skipped() {
		t.Errorf("Skipped: %v, %v; want false, true", got[0].Skipped(), got[2].Skipped())
	}
}

func TestProgramShapes(t *testing.T) {
	cases := []struct {
		name, code string
		imports    []string
		contains   []string
	}{
		{
			"a file", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println() }\n",
			[]string{"fmt"},
			[]string{"//line doc.md:7:1\npackage main\n"},
		},
		{
			"declarations", "// f says hello.\nfunc f(l *keyrate.Limiter) time.Duration { return l.Window() }\n",
			[]string{"github.com/keyrate/keyrate", "time"},
			[]string{"import (\n\tkeyrate \"github.com/keyrate/keyrate\"\n\ttime \"time\"\n)\n", "//line doc.md:7:1\n// f says hello.", "func main() {}"},
		},
		{
			"declarations with their own main", "func main() { fmt.Println() }\n",
			[]string{"fmt"},
			[]string{"func main() { fmt.Println() }\n"},
		},
		{
			"declarations importing for themselves", "import \"github.com/redis/go-redis/v9\"\n\nvar c *redis.Client\n",
			nil,
			[]string{"package main\n\n//line doc.md:7:1\nimport"},
		},
		{
			"statements", "l, err := keyrate.New(1, time.Second)\nif err != nil {\n\treturn err\n}\ndefer l.Close()\n",
			[]string{"github.com/keyrate/keyrate", "time"},
			[]string{"func snippet() error {\n//line doc.md:7:1\nl, err := keyrate.New(", "\n\treturn nil\n}\n"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, imports, err := Program(Snippet{"doc.md", 7, c.code})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parser.ParseFile(token.NewFileSet(), "", src, 0); err != nil {
				t.Errorf("the program does not parse: %v\n%s", err, src)
			}
			if !slices.Equal(imports, c.imports) {
				t.Errorf("imports %q, want %q", imports, c.imports)
			}
			for _, want := range c.contains {
				if !strings.Contains(src, want) {
					t.Errorf("program lacks %q:\n%s", want, src)
				}
			}
		})
	}
	if _, _, err := Program(Snippet{"doc.md", 7, "func (\n"}); err == nil || !strings.HasPrefix(err.Error(), "doc.md:7: ") {
		t.Errorf("Program on broken code = %v, want an error at doc.md:7", err)
	}
}

func TestGofmt(t *testing.T) {
	for code, want := range map[string]bool{
		"package main\n\nfunc main() {}\n":                  true,
		"package main\nfunc main()  {}\n":                   false,
		"func f() int { return 1 }\n":                       true,
		"func f() int {return 1}\n":                         false,
		"l, err := f()\nif err != nil {\n\treturn err\n}\n": true,
		"l, err := f()\nif err != nil {\n  return err\n}\n": false,
		"x := g(a,\n\tb, // one\n\tc)\n":                    true,
	} {
		got, err := Gofmt(Snippet{"doc.md", 1, code})
		if err != nil || got != want {
			t.Errorf("Gofmt(%q) = %v, %v; want %v", code, got, err, want)
		}
	}
	if _, err := Gofmt(Snippet{"doc.md", 1, "func (\n"}); err == nil {
		t.Error("Gofmt on broken code succeeded")
	}
}

// TestREADMEsCompile compiles every Go block of the repository's READMEs
// as a user's code would compile: in a module outside the repository that
// gets keyrate's modules at their release version from a module proxy made
// of the working tree.
func TestREADMEsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the READMEs' code against every module; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "cmd", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)

	var log bytes.Buffer
	c, err := release.NewConsumer(t.Context(), root, t.TempDir(), &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	get := map[string]bool{}
	compiled := map[string]int{}
	for _, file := range files {
		md, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, file)
		name = filepath.ToSlash(name)
		for _, s := range Extract(name, md) {
			if s.Skipped() {
				t.Logf("%s:%d: not compiled, as it says", s.File, s.Line)
				continue
			}
			if ok, err := Gofmt(s); err != nil || !ok {
				t.Errorf("%s:%d: not gofmt-clean (%v)", s.File, s.Line, err)
			}
			src, imports, err := Program(s)
			if err != nil {
				t.Error(err)
				continue
			}
			for _, p := range imports {
				if m, ok := c.Provider(p); ok {
					get[m.Path+"@"+c.Version] = true
				}
			}
			dir := filepath.Join(c.Dir, "snippets", fmt.Sprintf("%s_%d", strings.NewReplacer("/", "_", ".", "_").Replace(name), s.Line))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			compiled[name]++
		}
	}
	if compiled["README.md"] == 0 {
		t.Fatal("README.md has no Go block to compile")
	}
	t.Logf("compiling %v Go blocks", compiled)
	if len(get) > 0 {
		if _, err := c.Go(append([]string{"get"}, slices.Sorted(maps.Keys(get))...)...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Go("build", "./snippets/..."); err != nil {
		t.Errorf("README code does not compile:\n%v", err)
	}
}
