package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest"
)

// TestVersion: spine version and spine --version print the module's
// version, the Guest build (the hash of its manifest) and the CPython
// version, which is the one the real Guest reports.
func TestVersion(t *testing.T) {
	var outs []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitOK || stderr.Len() != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
		outs = append(outs, stdout.String())
	}
	if outs[0] != outs[1] {
		t.Fatalf("spine version and spine --version differ:\n%s\n%s", outs[0], outs[1])
	}
	sum := sha256.Sum256(guest.Manifest)
	lines := strings.Split(strings.TrimSuffix(outs[0], "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("version output:\n%s", outs[0])
	}
	// A test binary has no module version of its own: "(devel)".
	if lines[0] != "spine (devel)" {
		t.Errorf("line 1: %q", lines[0])
	}
	if want := regexp.MustCompile(`^guest ` + hex.EncodeToString(sum[:6]) + ` \(spine\.wasm [0-9a-f]{12}, python311\.zip [0-9a-f]{12}, abi 1\)$`); !want.MatchString(lines[1]) {
		t.Errorf("line 2: %q", lines[1])
	}
	if !strings.HasPrefix(lines[3], "go1.") {
		t.Errorf("line 4: %q", lines[3])
	}

	// The CPython version is the Guest's own.
	r, err := spine.New(t.Context(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	out, err := r.Run(t.Context(), spine.Request{Source: "import platform\nresult = platform.python_version()"})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("CPython %s (wasm32-wasi)", strings.Trim(string(out.Value), `"`)); lines[2] != want {
		t.Errorf("line 3: %q, want %q", lines[2], want)
	}
}

// TestVersionBuilt: a spine built by go build from a checkout says
// "(devel)"; the module version comes from the binary's build information.
func TestVersionBuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spine with the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	bin := filepath.Join(t.TempDir(), "spine")
	// -buildvcs=false: in a clone the go command stamps a pseudo-version
	// from the commit, which a test binary never has.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOPROXY=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != versionText() {
		t.Fatalf("the built spine says\n%s\nthe test binary says\n%s", out, versionText())
	}
}

func TestGuestBuildBadManifest(t *testing.T) {
	b := guestBuild([]byte("not json"))
	if b.CPython.Version != "(unknown)" || len(b.id) != 12 || short("") != "(unknown)" {
		t.Fatalf("%+v", b)
	}
}
