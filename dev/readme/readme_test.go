// Package readme checks that the Go code of the repository's Markdown files
// is code that go test compiles and runs: every go block quotes an Example
// of a package at or below the file's directory, either its body (with or
// without its output comment) or declarations of a file that holds an
// Example, as a whole-file example does. To change a README's code, change
// the Example and paste it. It also builds every module from a module
// outside the clone with the root README's replace lines (clone_test.go).
package readme

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	mdast "github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// quotable is what a Markdown file may quote: the bodies of the Examples
// under its directory, and the declarations of the files that hold them.
type quotable map[string]bool

// examples reads every _test.go file under dir.
func examples(dir string) (quotable, error) {
	q := quotable{}
	err := walk(dir, "_test.go", func(p string, src []byte) error {
		f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.ParseComments)
		if err != nil {
			return err
		}
		var decls []string
		hasExample := false
		for _, d := range f.Decls {
			decls = append(decls, declText(d, src, f.FileStart))
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			body := string(src[fn.Body.Lbrace-f.FileStart+1 : fn.Body.Rbrace-f.FileStart])
			body = strings.ReplaceAll("\n"+strings.Trim(body, "\n"), "\n\t", "\n")[1:]
			q[body] = true
			if i := max(strings.LastIndex(body, "\n// Output:"), strings.LastIndex(body, "\n// Unordered output:")); i >= 0 {
				q[body[:i]] = true
			}
			hasExample = true
		}
		for _, d := range decls {
			q[d] = q[d] || hasExample
		}
		return nil
	})
	return q, err
}

// declText is a declaration's source with its doc comment.
func declText(d ast.Decl, src []byte, base token.Pos) string {
	start := d.Pos()
	if fn, ok := d.(*ast.FuncDecl); ok && fn.Doc != nil {
		start = fn.Doc.Pos()
	} else if gen, ok := d.(*ast.GenDecl); ok && gen.Doc != nil {
		start = gen.Doc.Pos()
	}
	return string(src[start-base : d.End()-base])
}

// quotes reports whether code is in q: an Example's body, or declarations.
func (q quotable) quotes(code string) bool {
	code = strings.Trim(code, "\n")
	if q[code] {
		return true
	}
	src := []byte("package p\n\n" + code + "\n")
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ParseComments)
	if err != nil || len(f.Decls) == 0 {
		return false
	}
	for _, d := range f.Decls {
		if !q[declText(d, src, f.FileStart)] {
			return false
		}
	}
	return true
}

// walk calls fn on every file under dir whose name ends in suffix, outside
// hidden and testdata directories.
func walk(dir, suffix string, fn func(p string, src []byte) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(p, suffix):
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fn(p, src)
	})
}

// check returns a line for each go block of the Markdown files under root
// that quotes no Example.
func check(root string) ([]string, error) {
	var problems []string
	err := walk(root, ".md", func(p string, md []byte) error {
		var q quotable
		return mdast.Walk(goldmark.New().Parser().Parse(text.NewReader(md)), func(n mdast.Node, entering bool) (mdast.WalkStatus, error) {
			block, ok := n.(*mdast.FencedCodeBlock)
			if !entering || !ok || string(block.Language(md)) != "go" {
				return mdast.WalkContinue, nil
			}
			var code strings.Builder
			for i := range block.Lines().Len() {
				code.Write(md[block.Lines().At(i).Start:block.Lines().At(i).Stop])
			}
			var err error
			if q == nil {
				q, err = examples(filepath.Dir(p))
			}
			if err == nil && !q.quotes(code.String()) {
				name, _ := filepath.Rel(root, p)
				line := 1 + strings.Count(string(md[:block.Lines().At(0).Start]), "\n")
				problems = append(problems, fmt.Sprintf("%s:%d: this go block quotes no Example under %s/ (an Example's body, or declarations of a file holding one)",
					filepath.ToSlash(name), line, filepath.ToSlash(filepath.Dir(name))))
			}
			return mdast.WalkContinue, err
		})
	})
	return problems, err
}

// TestMarkdownQuotesExamples checks every Markdown file of the repository.
func TestMarkdownQuotesExamples(t *testing.T) {
	problems, err := check(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheck runs the check on a small tree: a README quoting an Example's
// body, with and without its output, a whole-file example's declarations,
// and four blocks that quote nothing it may quote.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"lib/example_test.go": "package lib_test\n\nimport \"fmt\"\n\nfunc Example() {\n\tx := 1\n\tfmt.Println(x)\n\t// Output: 1\n}\n",
		"lib/whole_example_test.go": "package lib_test\n\nimport \"fmt\"\n\n// hello greets.\nfunc hello() { fmt.Println(\"hi\") }\n\n" +
			"const n = 2\n\nfunc Example_hello() {\n\thello()\n\t// Output: hi\n}\n",
		"lib/helper_test.go":    "package lib_test\n\nfunc helper() {}\n",
		"other/example_test.go": "package other_test\n\nfunc Example() {\n\tprintln()\n}\n",
		"lib/README.md": "# lib\n\n```go\nx := 1\nfmt.Println(x)\n// Output: 1\n```\n\n" + // 4: the body
			"```go\nx := 1\nfmt.Println(x)\n```\n\n" + // 10: without its output
			"```go\n// hello greets.\nfunc hello() { fmt.Println(\"hi\") }\n\nconst n = 2\n```\n\n" + // 15
			"```go\nx := 2\nfmt.Println(x)\n```\n\n" + // 22: changed
			"```go\nfunc helper() {}\n```\n\n" + // 27: in a file with no Example
			"- a list item:\n\n  ```go\n  println()\n  ```\n\n" + // 33: another directory's Example
			"```go\n// hello greets.\nfunc hello() {}\n```\n\n" + // 37: a changed declaration
			"```sh\nnot go\n```\n",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		where, _, _ := strings.Cut(p, ": ")
		got = append(got, where)
	}
	if want := "lib/README.md:22 lib/README.md:27 lib/README.md:33 lib/README.md:37"; strings.Join(got, " ") != want {
		t.Errorf("check found %q, want %s:\n%s", got, want, strings.Join(problems, "\n"))
	}
}
