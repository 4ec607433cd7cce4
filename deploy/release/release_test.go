package release_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine/deploy/release"
)

// core is the library's module, whose version names the release.
const core = "github.com/spine-run/spine"

// TestRelease publishes the repository's modules at the release version
// into a module proxy in a directory, and from it alone (and the public
// modules every release takes, from the module cache or the machine's
// proxy), with no workspace, installs the spine command with go install
// (which the go command refuses for a module with a replace) and runs its
// demo, and builds the README's first program in a new module after go get
// of the library, as a consumer would (the build with -mod=readonly, a
// user's default: go get recorded all it needs); its output must be what the README
// shows, and the consumer's go line stays Spine's. make install-check runs
// it (slow: a build of the command from a module cache of its own).
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the command and builds a program from a module proxy")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mods, err := release.Modules(root)
	if err != nil {
		t.Fatal(err)
	}
	// Every module requires its siblings at one version: the release's.
	version := ""
	paths := map[string]bool{}
	for _, m := range mods {
		paths[m.Path] = true
		if m.Mod.Go == nil || m.Mod.Toolchain != nil {
			t.Errorf("%s: a go line and no toolchain line, please", m.Path)
		}
		if len(m.Mod.Replace) > 0 || len(m.Mod.Exclude) > 0 {
			t.Errorf("%s: go.mod has a replace or an exclude: go install refuses it", m.Path)
		}
	}
	for _, m := range mods {
		for _, r := range m.Mod.Require {
			if !paths[r.Mod.Path] {
				continue
			}
			if version == "" {
				version = r.Mod.Version
			}
			if r.Mod.Version != version {
				t.Errorf("%s requires %s %s; the release is %s", m.Path, r.Mod.Path, r.Mod.Version, version)
			}
		}
	}
	if version == "" {
		t.Fatal("no module requires another: no release version to publish")
	}
	t.Logf("publishing %d modules at %s", len(mods), version)
	work := t.TempDir()
	proxy := filepath.Join(work, "proxy")
	if err := release.Publish(mods, version, proxy); err != nil {
		t.Fatal(err)
	}

	// The machine's own GOPROXY after this one, and before it the module
	// cache's downloads (a directory in the same layout): the public
	// modules come from there when the cache has them. A module cache of
	// its own keeps this release's modules out of the machine's.
	cache := strings.TrimSpace(string(goEnv(t, "GOMODCACHE")))
	upstream := strings.TrimSpace(string(goEnv(t, "GOPROXY")))
	env := append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download"))+","+upstream,
		"GOSUMDB=off", // this release is in no checksum database
		"GOMODCACHE="+filepath.Join(work, "modcache"),
		"GOBIN="+filepath.Join(work, "bin"),
		"GOTOOLCHAIN=local",
	)
	run := func(dir string, name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
		}
		return out
	}

	// The command.
	run(work, "go", "install", core+"/cmd/spine@"+version)
	spine := filepath.Join(work, "bin", "spine")
	v := run(work, spine, "version")
	if !strings.HasPrefix(string(v), "spine "+version+"\n") {
		t.Errorf("spine version says\n%s\nwant spine %s first", v, version)
	}
	t.Logf("go install %s/cmd/spine@%s: spine version says %q", core, version, strings.SplitN(string(v), "\n", 2)[0])
	demo := string(run(work, spine, "demo"))
	for _, want := range []string{"lookup(key='book') -> 21\n", "result: 63\n"} {
		if !strings.Contains(demo, want) {
			t.Errorf("spine demo printed\n%s\nwithout %q", demo, want)
		}
	}

	// The library, in a new module with Spine's go line.
	program, want := readmeProgram(t, filepath.Join(root, "README.md"))
	var goLine string
	for _, m := range mods {
		if m.Path == core {
			goLine = m.Mod.Go.Version
		}
	}
	first := filepath.Join(work, "first")
	if err := os.MkdirAll(first, 0o755); err != nil {
		t.Fatal(err)
	}
	// In the README's order: go get, then the program, then a build as a
	// user's go command makes it, which changes no go.mod (-mod=readonly).
	if err := os.WriteFile(filepath.Join(first, "go.mod"), []byte("module example.com/first\n\ngo "+goLine+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(first, "go", "get", core+"@"+version)
	if err := os.WriteFile(filepath.Join(first, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	run(first, "go", "build", "-mod=readonly", "-o", "first", ".")
	mod, err := os.ReadFile(filepath.Join(first, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "\ngo "+goLine+"\n") || strings.Contains(string(mod), "\ntoolchain ") {
		t.Errorf("go get changed the consumer's go line (Spine's is %s):\n%s", goLine, mod)
	}
	if got := string(run(first, filepath.Join(first, "first"))); got != want {
		t.Fatalf("the README's program printed\n%s\nthe README says\n%s", got, want)
	}
	t.Logf("go get %s@%s: the README's program built in a new module (go %s) and printed what the README shows", core, version, goLine)
}

// goEnv is go env name, outside any workspace.
func goEnv(t *testing.T, name string) []byte {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return out
}

// readmeProgram is the first Go block under the README's "## Install" and
// the plain block after it: the program and its output.
func readmeProgram(t *testing.T, readme string) (program, output string) {
	t.Helper()
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	install := string(raw)
	i := strings.Index(install, "\n## Install\n")
	if i < 0 {
		t.Fatal("README.md has no Install section")
	}
	type block struct{ lang, text string }
	var blocks []block
	var cur *block
	for line := range strings.Lines(install[i:]) {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimSpace(line[3:])}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line
		}
	}
	for j, b := range blocks {
		if b.lang == "go" && j+1 < len(blocks) {
			return b.text, blocks[j+1].text
		}
	}
	t.Fatal("the Install section has no Go program followed by its output")
	return "", ""
}
