package main

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestRunAsUserWithoutHome: spine run as a user whose home does not exist
// (nobody, HOME=/nonexistent) runs the program, with an in-memory cache it
// says it uses; with --cache-dir on a folder it can write and --cache-seed
// on a cache spine warm filled, it starts from the seed without compiling.
// The first start into an empty cache says so before compiling and when
// ready, with the time taken.
func TestRunAsUserWithoutHome(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the Guest twice")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run spine as another user")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	bin := buildSpine(t)
	openToAll(t, filepath.Dir(bin))

	// A cache filled ahead of time, by root, readable by all.
	seed := filepath.Join(t.TempDir(), "seed")
	warm := exec.Command(bin, "warm", "--cache-dir", seed)
	warm.Env = append(os.Environ(), "SPINE_CONFIG=", "SPINE_CACHE_SEED=")
	out, err := warm.CombinedOutput()
	if err != nil {
		t.Fatalf("spine warm: %v\n%s", err, out)
	}
	text := string(out)
	compiling, ready := strings.Index(text, "compiling the Guest"), strings.Index(text, "compiled and ready")
	if compiling < 0 || ready < compiling || !strings.Contains(text[ready:], "elapsed=") {
		t.Errorf("spine warm into an empty cache did not say it compiles, then that it is ready with the time:\n%s", text)
	}
	openToAll(t, seed)

	writable := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(writable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(writable, uid, gid); err != nil {
		t.Fatal(err)
	}
	openToAll(t, filepath.Dir(writable))

	for _, c := range []struct {
		name       string
		args       []string
		wantStderr string // a line spine prints
		notStderr  string // a line it must not print
	}{
		{"no cache folder", nil, "kept in memory only", ""},
		{"--cache-dir and a seed", []string{"--cache-dir", writable, "--cache-seed", seed}, "", "compiling the Guest"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"run"}, append(c.args, "-")...)...)
			cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin"}
			cmd.Dir = "/"
			cmd.Stdin = strings.NewReader("print(6 * 7)\n")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("spine run as nobody: %v\nstderr:\n%s", err, stderr.String())
			}
			if stdout.String() != "42\n" {
				t.Errorf("stdout %q, want 42", stdout.String())
			}
			if c.wantStderr != "" && strings.Count(stderr.String(), c.wantStderr) != 1 {
				t.Errorf("stderr does not say %q once:\n%s", c.wantStderr, stderr.String())
			}
			if c.notStderr != "" && strings.Contains(stderr.String(), c.notStderr) {
				t.Errorf("stderr says %q:\n%s", c.notStderr, stderr.String())
			}
		})
	}
	if entries, _ := filepath.Glob(filepath.Join(writable, "code", "*")); len(entries) == 0 {
		t.Error("--cache-dir holds no compiled code after a run from the seed")
	}
}

// openToAll makes dir and the folders above it up to the temporary folder
// readable and searchable by every user, and everything under dir readable.
func openToAll(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil {
			os.Chmod(path, info.Mode().Perm()|0o555)
		}
		return nil
	})
	for d := filepath.Dir(dir); strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
}
