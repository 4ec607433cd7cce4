package housekeeping

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
)

// The limits on the module's non-test Go files.
const (
	maxFileLines = 700
	maxFuncLines = 120
)

// TestLimits fails on a non-test Go file of the module over maxFileLines
// lines, or with a function (declared or literal) over maxFuncLines lines.
// Other modules inside this one (examples/), build/ folders, testdata/ and
// generated files are not the module's code.
func TestLimits(t *testing.T) {
	root := moduleRoot(t)
	files := 0
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "build" || name == "testdata" || strings.HasPrefix(name, ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, problem := range overLimits(fset, f) {
			t.Errorf("%s: %s", rel, problem)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found only %d Go files under %s: is it the module's root?", files, root)
	}
}

// overLimits says how f breaks the limits, if it does.
func overLimits(fset *token.FileSet, f *ast.File) []string {
	var problems []string
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		problems = append(problems, fmt.Sprintf("%d lines, over the limit of %d: split it by concern", n, maxFileLines))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var name string
		switch fn := n.(type) {
		case *ast.FuncDecl:
			if fn.Body == nil {
				return true
			}
			name = fn.Name.Name
		case *ast.FuncLit:
			name = "a function literal"
		default:
			return true
		}
		start, end := fset.Position(n.Pos()), fset.Position(n.End())
		if lines := end.Line - start.Line + 1; lines > maxFuncLines {
			problems = append(problems, fmt.Sprintf("line %d: %s is %d lines, over the limit of %d", start.Line, name, lines, maxFuncLines))
		}
		return true
	})
	return problems
}

// moduleRoot is the folder of the go.mod above this package.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}
