package sessionstore_test

import (
	"bufio"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spine-run/spine/sessionstore"
)

// killedEnv makes the test binary a writer of TestFileStoreKilledWriter
// that dies mid-write: "DIR".
const killedEnv = "SESSIONSTORE_KILLED_WRITER"

// temps returns the temporary files under dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// TestFileStoreKilledWriter: a writer killed (SIGKILL) while a snapshot
// streams to its temporary file leaves that file; opening the store
// removes it, and leaves the temporary file of a writer that is alive,
// whose write then lands (issue 34.13).
func TestFileStoreKilledWriter(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("flock(2)")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreDyingWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), killedEnv+"="+dir)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil { // never written: the writer waits on it
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "writing" {
		t.Fatalf("the writer: %q %v", out.Text(), out.Err())
	}
	cmd.Process.Kill()
	cmd.Wait()
	dead := temps(t, dir)
	if len(dead) != 1 {
		t.Fatalf("the killed writer left %v, want one temporary file", dead)
	}

	// A writer of this process, alive, in the middle of its write.
	ctx := context.Background()
	st, err := sessionstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	midway, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- st.Put(ctx, "alive", sessionstore.Meta{Generation: 1}, 1<<20, func(w io.Writer) error {
			io.WriteString(w, "half")
			close(midway)
			<-release
			_, err := io.WriteString(w, " and the rest")
			return err
		})
	}()
	<-midway
	again, err := sessionstore.Open(ctx, "file://"+dir) // removes the dead writer's file only
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if left := temps(t, dir); len(left) != 1 || left[0] == dead[0] {
		t.Fatalf("after opening the store: %v, want only the live writer's (the dead one's was %s)", left, dead[0])
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the live writer's Put: %v", err)
	}
	rd, _, err := again.Get(ctx, "alive", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rd)
	rd.Close()
	if string(got) != "half and the rest" {
		t.Errorf("the live writer's snapshot: %q", got)
	}
	if left := temps(t, dir); len(left) != 0 {
		t.Errorf("left after the writes: %v", left)
	}
}

// TestFileStoreDyingWriter is the writer TestFileStoreKilledWriter kills;
// run alone, it does nothing.
func TestFileStoreDyingWriter(t *testing.T) {
	dir := os.Getenv(killedEnv)
	if dir == "" {
		t.Skip("the writer of TestFileStoreKilledWriter")
	}
	st, err := sessionstore.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Put(context.Background(), "killed", sessionstore.Meta{Generation: 1}, 1<<20, func(w io.Writer) error {
		io.WriteString(w, "half a snapshot")
		os.Stdout.WriteString("writing\n")
		io.ReadAll(os.Stdin) // until killed
		return nil
	})
}
