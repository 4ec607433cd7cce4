package image

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImage builds the image from this checkout, checks its configuration,
// unpacks its layers into a folder, makes that root read-only, and runs the
// entrypoint there (chroot) as the image's unprivileged user, with
// --cache-dir on a writable folder as a container's emptyDir: it answers
// POST /v1/run on loopback, from the baked cache, without compiling.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spine and compiles the Guest")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: to unpack the owners, chroot and run as the image's user")
	}
	if _, err := os.Stat(CACerts); err != nil {
		t.Skip("no CA certificates here (apt-get install ca-certificates)")
	}
	img, err := Build(context.Background(), Options{Source: "../..", Version: "test", Guests: []string{"data"}, Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if cfg.User != "65532:65532" || !slices.Equal(cfg.Entrypoint, []string{"/usr/local/bin/spine"}) {
		t.Errorf("user %q, entrypoint %q", cfg.User, cfg.Entrypoint)
	}
	if _, ok := cfg.ExposedPorts["8080/tcp"]; !ok || !slices.Equal(cfg.Cmd, []string{"serve", "--listen", ":8080"}) {
		t.Errorf("ports %v, cmd %q", cfg.ExposedPorts, cfg.Cmd)
	}
	for _, label := range []string{"org.opencontainers.image.title", "org.opencontainers.image.source", "org.opencontainers.image.version", "org.opencontainers.image.licenses"} {
		if cfg.Labels[label] == "" {
			t.Errorf("no label %s", label)
		}
	}
	if !slices.Contains(cfg.Env, "SPINE_CACHE_SEED="+SeedDir) {
		t.Errorf("env %q", cfg.Env)
	}

	root := t.TempDir()
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bin/sh", "usr/bin/sh", "bin/busybox"} {
		if _, err := os.Lstat(filepath.Join(root, name)); err == nil {
			t.Errorf("the image has a shell: /%s", name)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), ":65532:65532:") {
		t.Errorf("/etc/passwd has no entry for 65532:\n%s", passwd)
	}
	if codes, _ := filepath.Glob(filepath.Join(root, SeedDir, "code", "*")); len(codes) == 0 {
		t.Error("the image has no compiled code in its cache")
	}
	if err := ReadOnly(root); err != nil {
		t.Fatal(err)
	}
	// The emptyDir: the only folder the process can write.
	cache := filepath.Join(root, "run", "cache")
	if err := os.Mkdir(filepath.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(cache, UID, UID); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(root), 0o755) // t.TempDir's: the user must reach root

	r, err := Start(root, cfg, []string{"serve", "--listen", "127.0.0.1:0", "--cache-dir", "/run/cache"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+r.Addr+"/v1/run", "application/json", strings.NewReader(`{"source": "print(6 * 7)\n21 * 2"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct {
		Value  json.RawMessage
		Stdout string
	}
	if err := json.Unmarshal(body, &answer); err != nil || resp.StatusCode != 200 || string(answer.Value) != "42" || answer.Stdout != "42\n" {
		t.Errorf("POST /v1/run: %d %s (%v)", resp.StatusCode, body, err)
	}
	rest, err := r.Stop()
	if err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
	all := strings.Join(append(r.Lines, rest...), "\n")
	if strings.Contains(all, "compiling the Guest") || strings.Contains(all, "cannot be used") {
		t.Errorf("the replica did not start from the baked cache:\n%s", all)
	}

	// The data Guest's code is baked too: a replica of it runs pandas
	// without compiling.
	r, err = Start(root, cfg, []string{"serve", "--listen", "127.0.0.1:0", "--cache-dir", "/run/cache", "--guest", "data"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post("http://"+r.Addr+"/v1/run", "application/json", strings.NewReader(`{"source": "import pandas as pd\nint(pd.Series([1, 2, 3]).sum())"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"value":6`) {
		t.Errorf("POST /v1/run to --guest data: %d %s", resp.StatusCode, body)
	}
	rest, err = r.Stop()
	if err != nil {
		t.Errorf("after SIGTERM: %v", err)
	}
	if all := strings.Join(append(r.Lines, rest...), "\n"); strings.Contains(all, "compiling the Guest") {
		t.Errorf("the data Guest's replica did not start from the baked cache:\n%s", all)
	}
	// Nothing was written outside the emptyDir.
	if entries, _ := os.ReadDir(filepath.Join(root, "tmp")); len(entries) != 0 {
		t.Errorf("/tmp: %v", entries)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestWriteReadable: every file of the layout Write makes, the layers'
// blobs included, is readable by every user, so that a tool run as another
// user than the builder can push or load it.
func TestWriteReadable(t *testing.T) {
	l := newLayer()
	l.file("hello", 0o444, []byte("hello"))
	layer, err := l.v1()
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := Write(img, dir, "", "spine:test"); err != nil {
		t.Fatal(err)
	}
	blobs := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if strings.Contains(p, "blobs") {
			blobs++
		}
		if info.Mode().Perm()&0o444 != 0o444 {
			t.Errorf("%s is %v", p, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if blobs < 3 { // the layer, the config, the manifest
		t.Errorf("%d blobs", blobs)
	}
}
