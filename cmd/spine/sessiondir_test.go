package main

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// dirBytes is the bytes of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestServeSessionDirBounded: with --session-dir alone, the sessions kept
// across restarts (its store) count in --session-dir-mib with the
// hibernated sessions' snapshots: sessions that do not compress, written
// well past the cap, never take the folder past it, nor does the drain
// (issue 34.1).
func TestServeSessionDirBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	dir := t.TempDir()
	const mib = 8
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--session-dir", dir, "--session-dir-mib", "8",
		"--live-sessions", "1", "--session-memory", "64", "--session-idle", "0")
	url := "http://" + addr
	body, _ := json.Marshal(map[string]string{"source": "import os\nx = os.urandom(1 << 20)\nlen(x)"})
	most, stored := int64(0), false
	for range 16 {
		resp, err := http.Post(url+"/v1/sessions", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var info struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			post(t, url+"/v1/sessions/"+info.ID+"/run", string(body)) // the cap may refuse it
		}
		most = max(most, dirBytes(t, dir))
		if _, err := os.Stat(filepath.Join(dir, "sessions")); err == nil {
			stored = true
		}
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(t) // 4 when the store had no room left for a session at the drain
	most = max(most, dirBytes(t, dir))
	if !stored {
		t.Fatal("no session was written to the folder's store")
	}
	if most > mib<<20 {
		t.Errorf("the folder held %d bytes, over its --session-dir-mib of %d MiB", most, mib)
	}
	t.Logf("the folder held %d bytes at most (cap %d)", most, mib<<20)
}

// TestServeSessionDirExpires: with --session-dir alone, a session the
// Runner closes after --session-ttl is removed from the folder, and so is
// one stored before a restart and unused for --session-ttl since (issue
// 34.1).
func TestServeSessionDirExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the spine command")
	}
	bin := buildSpine(t)
	dir := t.TempDir()
	p, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--session-dir", dir, "--session-memory", "64",
		"--session-idle", "100ms", "--session-ttl", "1s")
	url := "http://" + addr
	id := createSession(t, url)
	sessionRun(t, url, id, "x = 1", "null")
	folder := filepath.Join(dir, "sessions", id)
	for !exists(folder) { // written when it hibernates
		time.Sleep(20 * time.Millisecond)
	}
	for exists(folder) { // closed after its TTL, then removed
		time.Sleep(20 * time.Millisecond)
	}
	if status, _, _ := post(t, url+"/v1/sessions/"+id+"/run", `{"source": "x"}`); status != http.StatusNotFound {
		t.Errorf("a run of the expired session: %d, want 404", status)
	}

	kept := createSession(t, url)
	sessionRun(t, url, kept, "y = 2", "null")
	p.stop(t) // written at the drain
	folder = filepath.Join(dir, "sessions", kept)
	if !exists(folder) {
		t.Fatal("the drain did not write the session")
	}
	old := time.Now().Add(-2 * time.Hour)
	filepath.WalkDir(folder, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(path, old, old)
		}
		return nil
	})
	p, _ = start(t, bin, "serve", "--listen", "127.0.0.1:0", "--session-dir", dir, "--session-memory", "64", "--session-ttl", "1h")
	for exists(folder) { // unused for two hours: removed at start
		time.Sleep(20 * time.Millisecond)
	}
	p.stop(t)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
