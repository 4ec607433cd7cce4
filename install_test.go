package spine_test

import (
	"bytes"
	"encoding/json"
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goDirective is the go line of the go.mod in dir ("" when it has none),
// and whether the file has a toolchain line.
func goDirective(t *testing.T, dir string) (goLine string, toolchain bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 2 && fields[0] == "go" {
			goLine = fields[1]
		}
		if len(fields) > 0 && fields[0] == "toolchain" {
			toolchain = true
		}
	}
	return goLine, toolchain
}

// goCommand runs the go command in dir, outside the workspace (as a consumer
// reads the core module), and returns its standard output. mod is the -mod
// flag: "readonly" in this checkout (nothing in it may change).
func goCommand(t *testing.T, dir, mod string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod="+mod+" -buildvcs=false", "GOTOOLCHAIN=local", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// TestGoDirective: go.mod's go line is the lowest the dependencies allow
// (the highest go line among them), and no toolchain line makes a consumer
// switch Go.
func TestGoDirective(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	goLine, toolchain := goDirective(t, ".")
	if toolchain {
		t.Error("go.mod has a toolchain line: it makes every consumer download that Go")
	}
	floor, by := "1.0", "nothing"
	// Every module of the graph counts: a consumer's go command reads each
	// one's go line when it loads the graph. Their go.mod files may not be in
	// the module cache (a dependency's test dependency no build downloads),
	// so this listing may fetch them from the module proxy.
	dec := json.NewDecoder(bytes.NewReader(goCommand(t, ".", "readonly", "list", "-m", "-json", "all")))
	for dec.More() {
		var m struct {
			Path      string
			Main      bool
			GoVersion string
		}
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if !m.Main && m.GoVersion != "" && version.Compare("go"+m.GoVersion, "go"+floor) > 0 {
			floor, by = m.GoVersion, m.Path
		}
	}
	if goLine != floor {
		t.Errorf("go.mod says go %s; the lowest its dependencies allow is %s (set by %s)", goLine, floor, by)
	}
}

// TestLeanCore: the library's module requires no cloud SDK. Its module
// graph (go list -m all: what a consumer's go command reads) names no
// gocloud.dev, AWS or Azure module, and of Google Cloud's only
// cloud.google.com/go/compute/metadata, which golang.org/x/oauth2's go.mod
// requires (the MCP SDK imports x/oauth2): no package of it is built, so a
// consumer reads its go.mod and downloads none of its code. The store in
// the cloud is the module github.com/spine-run/spine/cloudstore.
func TestLeanCore(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cloud := []string{"gocloud.dev", "cloud.google.com/", "github.com/aws/", "github.com/Azure/", "github.com/AzureAD/"}
	isCloud := func(path string) bool {
		for _, p := range cloud {
			if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, p) {
				return true
			}
		}
		return false
	}
	modules := strings.Fields(string(goCommand(t, ".", "readonly", "list", "-m", "-f", "{{.Path}}", "all")))
	var cloudModules []string
	for _, m := range modules {
		if isCloud(m) && m != "cloud.google.com/go/compute/metadata" {
			t.Errorf("the core's module graph has %s", m)
		}
		if isCloud(m) {
			cloudModules = append(cloudModules, m)
		}
	}
	if len(cloudModules) > 0 {
		// The one allowed is there only as a go.mod: no package of the
		// core, nor of its tests, comes from it.
		pkgs := goCommand(t, ".", "readonly", "list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
		for _, m := range strings.Fields(string(pkgs)) {
			if isCloud(m) {
				t.Errorf("the core builds a package of %s", m)
			}
		}
	}
	t.Logf("%d modules in the core's graph; of the cloud's: %v", len(modules), cloudModules)
}
