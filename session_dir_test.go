package spine_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// hibernatedFiles returns the files a Runner keeps in its folder of the
// session folder dir (session_dir.go), its lock left out; it fails the test
// unless there is exactly one such folder.
func hibernatedFiles(t *testing.T, dir string) []string {
	t.Helper()
	folders, _ := filepath.Glob(filepath.Join(dir, ".spine-runner-*"))
	if len(folders) != 1 {
		t.Fatalf("the Runners' folders in %s: %v, want one", dir, folders)
	}
	files, _ := filepath.Glob(filepath.Join(folders[0], "*"))
	return slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "lock" })
}

// TestSessionDirAbandoned: a process killed with hibernated sessions
// leaves its snapshots behind; the next Runner on the folder removes them,
// and never the folder of a Runner alive, whose Close removes its own.
func TestSessionDirAbandoned(t *testing.T) {
	if os.Getenv("SPINE_TEST_HIBERNATE_DIR") != "" { // the process killed
		dir := os.Getenv("SPINE_TEST_HIBERNATE_DIR")
		r, err := spine.New(context.Background(), spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Dir: dir}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := r.NewSession(context.Background())
		if err == nil {
			_, err = s.Run(context.Background(), spine.Request{Source: "x = 1"})
		}
		if err == nil {
			err = s.Hibernate(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("hibernated\n")
		select {} // until killed
	}
	ctx := context.Background()
	dir := t.TempDir()
	alive := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Dir: dir}})
	held := spinetest.NewSession(t, alive)
	spinetest.Step(t, held, "y = 2")
	if err := held.Hibernate(ctx); err != nil {
		t.Fatal(err)
	}
	kept := hibernatedFiles(t, dir)

	cmd := exec.Command(os.Args[0], "-test.run=^TestSessionDirAbandoned$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SPINE_TEST_HIBERNATE_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("hibernated\n"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "hibernated\n" {
		cmd.Process.Kill()
		t.Fatalf("the child: %q %v", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if folders, _ := filepath.Glob(filepath.Join(dir, ".spine-runner-*")); len(folders) != 2 {
		t.Fatalf("folders after the kill: %v", folders)
	}

	// Folders a process began to make: one it died making long ago, and
	// one being made now, which the sweep must leave.
	stale, fresh := filepath.Join(dir, ".spine-new-1"), filepath.Join(dir, ".spine-new-2")
	for _, d := range []string{stale, fresh} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	os.Chtimes(stale, long, long)

	next := spinetest.NewRunner(t, spinetest.NewTools().Manifest(), &spine.Options{PoolSize: -1, Sessions: spine.SessionOptions{Dir: dir}})
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a folder abandoned while made is left: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a folder being made was swept: %v", err)
	}
	os.Remove(fresh)
	folders, _ := filepath.Glob(filepath.Join(dir, ".spine-runner-*"))
	if len(folders) != 2 { // the live Runner's and next's
		t.Fatalf("folders after a new Runner: %v", folders)
	}
	if got := spinetest.Step(t, held, "y"); got != "2" { // its snapshot is whole
		t.Fatalf("the live Runner's hibernated session: %s", got)
	}
	if _, err := os.Stat(kept[0]); !os.IsNotExist(err) {
		t.Fatalf("the woken session's file: %v", err)
	}
	alive.Close(ctx)
	next.Close(ctx)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left behind after Close: %v", entries)
	}
}
