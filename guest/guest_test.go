package guest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/abi"
)

type manifest struct {
	ABIVersion int               `json:"abi_version"`
	Sources    map[string]string `json:"sources"`
	Artifact   map[string]string `json:"artifact"`
}

func readManifest(t *testing.T) manifest {
	t.Helper()
	var m manifest
	if err := json.Unmarshal(Manifest, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	return m
}

func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// TestSourcesMatchManifest fails when a Guest source changed (or appeared)
// without a rebuild: run `make guest` and commit guest/artifact.
func TestSourcesMatchManifest(t *testing.T) {
	m := readManifest(t)
	root := ".."
	var present []string
	for _, pattern := range []string{"*.sh", "*.py", "Setup.local", "c/*", "cpython/*.patch"} {
		matches, _ := filepath.Glob(pattern)
		for _, p := range matches {
			if info, err := os.Stat(p); err == nil && !info.IsDir() {
				present = append(present, filepath.ToSlash(filepath.Join("guest", p)))
			}
		}
	}
	// The Guest's Python: every .py under python/, packages included (as mkmanifest.py).
	err := filepath.WalkDir("python", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".py") {
			present = append(present, filepath.ToSlash(filepath.Join("guest", p)))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(present)
	for _, rel := range present {
		want, ok := m.Sources[rel]
		if !ok {
			t.Errorf("%s is not in guest/artifact/manifest.json: rebuild the Guest (make guest)", rel)
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if got := sum(data); got != want {
			t.Errorf("%s changed since the Guest was built: rebuild it (make guest) and commit guest/artifact", rel)
		}
	}
	for rel := range m.Sources {
		if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
			t.Errorf("%s is in the manifest but missing: rebuild the Guest (make guest)", rel)
		}
	}
}

func TestArtifactMatchesManifest(t *testing.T) {
	m := readManifest(t)
	for name, data := range map[string][]byte{"spine.wasm": Wasm, "python311.zip": StdlibZip, "LICENSE.python": []byte(License)} {
		if got := sum(data); got != m.Artifact[name] {
			t.Errorf("%s does not match manifest.json", name)
		}
	}
	// Every file of the artifact, the licences beside it included, is the one the manifest names.
	for name, want := range m.Artifact {
		data, err := os.ReadFile(filepath.Join("artifact", name))
		if err != nil || sum(data) != want {
			t.Errorf("artifact/%s does not match manifest.json (%v)", name, err)
		}
	}
	for _, name := range []string{"LICENSE.zlib", "LICENSE.bzip2", "LICENSE.xz", "LICENSE.sqlite3", "LICENSE.tzdata"} {
		if _, ok := m.Artifact[name]; !ok {
			t.Errorf("manifest.json does not name %s", name)
		}
	}
	if m.ABIVersion != abi.Version {
		t.Errorf("abi_version %d", m.ABIVersion)
	}
}

func TestStdlibFS(t *testing.T) {
	fsys := StdlibFS(StdlibZip)
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil || len(entries) != 1 || entries[0].Name() != StdlibZipName {
		t.Fatalf("ReadDir: %v %v", entries, err)
	}
	f, err := fsys.Open(StdlibZipName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Stat()
	if info.Size() != int64(len(StdlibZip)) || info.Mode().Perm() != 0o444 {
		t.Fatalf("stat: %d %v", info.Size(), info.Mode())
	}
	data, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(data, StdlibZip) {
		t.Fatalf("read: %v", err)
	}
	if _, err := fsys.Open("etc/passwd"); err == nil {
		t.Fatal("opened a file that is not there")
	}
}
