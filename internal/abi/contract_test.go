package abi_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/spine-run/spine/internal/abi"
)

const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// cTypes maps a C declaration's parameter list, or its return type, to
// WebAssembly value types as clang lowers them for wasm32.
func cTypes(t *testing.T, decl string) []api.ValueType {
	t.Helper()
	decl = strings.TrimSpace(decl)
	if decl == "" || decl == "void" {
		return nil
	}
	var types []api.ValueType
	for _, p := range strings.Split(decl, ",") {
		p = strings.TrimSpace(p)
		switch fields := strings.Fields(p); {
		case strings.Contains(p, "*"), fields[0] == "uint32_t", fields[0] == "int32_t", fields[0] == "int":
			types = append(types, api.ValueTypeI32)
		case fields[0] == "uint64_t", fields[0] == "int64_t":
			types = append(types, api.ValueTypeI64)
		default:
			t.Fatalf("no WebAssembly type for the C type of %q", p)
		}
	}
	return types
}

func signature(params, results []api.ValueType) string {
	name := func(ts []api.ValueType) string {
		var names []string
		for _, v := range ts {
			names = append(names, api.ValueTypeName(v))
		}
		return "(" + strings.Join(names, ", ") + ")"
	}
	return name(params) + " → " + name(results)
}

func describe(f abi.Func) string { return f.Name + signature(f.Params, f.Results) }

var (
	cImport = regexp.MustCompile(`__attribute__\(\(import_module\("(\w+)"\), import_name\("(\w+)"\)\)\)\s+(\w+)\s+\w+\(([^)]*)\);`)
	cExport = regexp.MustCompile(`__attribute__\(\(export_name\("(\w+)"\)\)\)\s+(\w+)\s+\w+\(([^)]*)\)`)
	cDefine = regexp.MustCompile(`(?m)^#define (SPINE_\w+) (.+)$`)
	cPyInt  = regexp.MustCompile(`PyModule_AddIntConstant\(m, "(\w+)", (SPINE_\w+)\)`)
)

// cValue evaluates a #define of a number: 1, 0xFFFFFFFFu, (1u << 20).
func cValue(t *testing.T, expr string) uint64 {
	t.Helper()
	expr = strings.Trim(strings.TrimSpace(expr), "()")
	number := func(s string) uint64 {
		n, err := strconv.ParseUint(strings.TrimRight(strings.TrimSpace(s), "uU"), 0, 64)
		if err != nil {
			t.Fatalf("#define value %q: %v", expr, err)
		}
		return n
	}
	if a, b, ok := strings.Cut(expr, "<<"); ok {
		return number(a) << number(b)
	}
	return number(expr)
}

// TestSpineC checks the Guest's C side against the table: the functions it
// imports from the Host and exports, with their signatures, and the numbers
// it defines and hands its Python.
func TestSpineC(t *testing.T) {
	src := read(t, "guest/c/spine.c")

	var imports []abi.Func
	for _, m := range cImport.FindAllStringSubmatch(src, -1) {
		if m[1] != abi.Module {
			t.Errorf("spine.c imports %s from module %q, not %q", m[2], m[1], abi.Module)
		}
		imports = append(imports, abi.Func{Name: m[2], Params: cTypes(t, m[4]), Results: cTypes(t, m[3])})
	}
	if len(imports) != len(abi.Imports) {
		t.Errorf("spine.c imports %d functions, the table has %d", len(imports), len(abi.Imports))
	}
	for i := range min(len(imports), len(abi.Imports)) {
		if got, want := describe(imports[i]), describe(abi.Imports[i]); got != want {
			t.Errorf("import %d: spine.c declares %s, the table %s", i, got, want)
		}
	}

	exports := map[string]abi.Func{}
	for _, m := range cExport.FindAllStringSubmatch(src, -1) {
		exports[m[1]] = abi.Func{Name: m[1], Params: cTypes(t, m[3]), Results: cTypes(t, m[2])}
	}
	for _, want := range abi.Exports {
		if want.Name == abi.Initialize.Name {
			continue // the WASI toolchain's, not spine.c's
		}
		got, ok := exports[want.Name]
		if !ok {
			t.Errorf("spine.c does not export %s", want.Name)
			continue
		}
		if g, w := describe(got), describe(want.Func); g != w {
			t.Errorf("spine.c exports %s, the table %s", g, w)
		}
		delete(exports, want.Name)
	}
	for name := range exports {
		t.Errorf("spine.c exports %s, which the table lacks", name)
	}

	defines := map[string]string{}
	for _, m := range cDefine.FindAllStringSubmatch(src, -1) {
		defines[m[1]] = m[2]
	}
	for name, want := range map[string]uint64{
		"SPINE_ABI_VERSION":    abi.Version,
		"SPINE_MAX_MESSAGE":    abi.MaxMessage,
		"SPINE_MAX_ERROR_TEXT": abi.MaxErrorText,
		"SPINE_FAILED":         uint64(abi.Failed),
		"SPINE_PEEK_RUNNING":   uint64(abi.PeekRunning),
		"SPINE_PEEK_NONE":      uint64(abi.PeekNone),
	} {
		expr, ok := defines[name]
		if !ok {
			t.Errorf("spine.c does not define %s", name)
		} else if got := cValue(t, expr); got != want {
			t.Errorf("spine.c: %s is %#x, the table's is %#x", name, got, want)
		}
	}

	handed := map[string]string{}
	for _, m := range cPyInt.FindAllStringSubmatch(src, -1) {
		handed[m[1]] = m[2]
	}
	for py, c := range map[string]string{"ABI_VERSION": "SPINE_ABI_VERSION", "MAX_MESSAGE": "SPINE_MAX_MESSAGE", "MAX_ERROR_TEXT": "SPINE_MAX_ERROR_TEXT"} {
		if handed[py] != c {
			t.Errorf("spine.c hands _spine.%s %q, not %s", py, handed[py], c)
		}
	}
}

// TestPythonReadsLimitsFromSpine checks that the Guest's Python takes the
// limits from _spine (which has them from spine.c) instead of repeating them:
// each is read from _spine somewhere, and no module assigns one a number.
func TestPythonReadsLimitsFromSpine(t *testing.T) {
	var sources []string
	dir := filepath.Join(root, "guest", "python")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".py") {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sources = append(sources, string(data))
		}
		return err
	})
	if err != nil || len(sources) == 0 {
		t.Fatalf("reading guest/python: %d files, %v", len(sources), err)
	}
	all := strings.Join(sources, "\n")
	for _, name := range []string{"MAX_MESSAGE", "MAX_ERROR_TEXT"} {
		read := regexp.MustCompile(`_spine\.` + name + `\b|from _spine import ` + name + `\b`)
		if !read.MatchString(all) {
			t.Errorf("the Guest's Python never reads _spine.%s", name)
		}
		repeated := regexp.MustCompile(`(?m)^\s*\w*` + name + `\s*=\s*[(\d]`)
		if m := repeated.FindString(all); m != "" {
			t.Errorf("the Guest's Python repeats a limit: %q", strings.TrimSpace(m))
		}
	}
}

var (
	docImport = regexp.MustCompile("(?m)^\\| `(\\w+)` \\| `\\(([^)]*)\\)(?: → (\\w+))?` \\|")
	docExport = regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (?:`\\(([^)]*)\\)(?: → (\\w+))?`)? *\\|")
)

// section returns the part of doc under the heading "## name".
func section(t *testing.T, doc, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n## "+name+"\n")
	if !ok {
		t.Fatalf("docs/abi.md has no section %q", name)
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	return body
}

// docArity is a documented signature as the table writes it: how many
// parameters, and the result's WebAssembly type.
func docArity(params, result string) string {
	n := 0
	if strings.TrimSpace(params) != "" {
		n = len(strings.Split(params, ","))
	}
	switch result {
	case "":
		return fmt.Sprintf("%d → ()", n)
	case "u64":
		return fmt.Sprintf("%d → (i64)", n)
	}
	return fmt.Sprintf("%d → (i32)", n)
}

func tableArity(f abi.Func) string {
	results := "()"
	if len(f.Results) > 0 {
		results = "(" + api.ValueTypeName(f.Results[0]) + ")"
	}
	return fmt.Sprintf("%d → %s", len(f.Params), results)
}

// TestDocs checks docs/abi.md against the table: its version, its tables of
// imports and exports (every one, in order, with its arity and result), and
// the numbers it names.
func TestDocs(t *testing.T) {
	doc := read(t, "docs/abi.md")
	if want := fmt.Sprintf("# Guest ABI v%d\n", abi.Version); !strings.HasPrefix(doc, want) {
		t.Errorf("docs/abi.md does not start %q", want)
	}

	rows := docImport.FindAllStringSubmatch(section(t, doc, "Imports (module `"+abi.Module+"`)"), -1)
	var names []string
	for i, row := range rows {
		names = append(names, row[1])
		if i < len(abi.Imports) && docArity(row[2], row[3]) != tableArity(abi.Imports[i]) {
			t.Errorf("docs/abi.md has %s as %s, the table %s", row[1], docArity(row[2], row[3]), tableArity(abi.Imports[i]))
		}
	}
	var want []string
	for _, f := range abi.Imports {
		want = append(want, f.Name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("docs/abi.md's imports are %v, the table's %v", names, want)
	}

	rows = docExport.FindAllStringSubmatch(section(t, doc, "Exports"), -1)
	names, want = nil, []string{"memory"}
	for _, e := range abi.Exports {
		want = append(want, e.Name)
	}
	for _, row := range rows {
		names = append(names, row[1])
		i := slices.IndexFunc(abi.Exports, func(e abi.Export) bool { return e.Name == row[1] })
		if i >= 0 && docArity(row[2], row[3]) != tableArity(abi.Exports[i].Func) {
			t.Errorf("docs/abi.md has %s as %s, the table %s", row[1], docArity(row[2], row[3]), tableArity(abi.Exports[i].Func))
		}
	}
	if !slices.Equal(names, want) {
		t.Errorf("docs/abi.md's exports are %v, the table's %v", names, want)
	}

	for what, text := range map[string]string{
		"Failed":       fmt.Sprintf("`0x%X`", abi.Failed),
		"PeekRunning":  fmt.Sprintf("`0x%X`", abi.PeekRunning),
		"PeekNone":     fmt.Sprintf("`0x%X`", abi.PeekNone),
		"MaxMessage":   fmt.Sprintf("%d MiB (`maxMessage`", abi.MaxMessage>>20),
		"MaxErrorText": fmt.Sprintf("%d KiB", abi.MaxErrorText>>10),
	} {
		if !strings.Contains(strings.Join(strings.Fields(doc), " "), text) {
			t.Errorf("docs/abi.md does not name %s as %s", what, text)
		}
	}
}

// TestImportNamesInOneFile checks that the Host's imports are named in one Go
// file, this package's table: everything else takes them from it. Test files
// aside (Python source in them names functions of the Guest's own).
func TestImportNamesInOneFile(t *testing.T) {
	names := map[string]bool{}
	for _, f := range abi.Imports {
		names[strconv.Quote(f.Name)] = true
	}
	found := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "build" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && names[lit.Value] {
				rel, _ := filepath.Rel(root, p)
				found[filepath.ToSlash(rel)] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !found["internal/abi/abi.go"] {
		t.Errorf("the Host's imports are named in %v, not in internal/abi/abi.go alone", found)
	}
}
