package sessionstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/spine-run/spine/sessionstore"
)

// racerEnv makes the test binary a racer of TestFileStoreAcrossProcesses:
// "DIR RACER IDS".
const racerEnv = "SESSIONSTORE_RACER"

// TestFileStoreAcrossProcesses: processes sharing one file:// directory
// race to write generation 1 of the same sessions, each released at once
// by one byte on its stdin; for every session exactly one wins, and the
// store holds the winner's snapshot. (gocloud's fileblob alone checks for
// the file and renames under a lock of its own process: two processes can
// both win, and the later rename replaces the earlier.)
func TestFileStoreAcrossProcesses(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("flock(2)")
	}
	if testing.Short() {
		t.Skip("processes racing on a directory")
	}
	const racers, ids = 4, 400
	dir := t.TempDir()
	type racer struct {
		cmd   *exec.Cmd
		out   *bufio.Scanner
		wins  map[string]bool
		stdin io.WriteCloser
	}
	var rs []*racer
	for i := range racers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFileStoreRacer$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", racerEnv, dir, i, ids))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		r := &racer{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), wins: map[string]bool{}}
		if !r.out.Scan() || r.out.Text() != "ready" { // the store is open
			t.Fatalf("racer %d: %q %v", i, r.out.Text(), r.out.Err())
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		r.stdin.Write([]byte{1}) // go
		r.stdin.Close()
	}
	for i, r := range rs {
		for r.out.Scan() {
			if id, ok := strings.CutPrefix(r.out.Text(), "won "); ok {
				r.wins[id] = true
			}
		}
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	st, err := sessionstore.Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	double := 0
	for n := range ids {
		id := fmt.Sprintf("race-%d", n)
		var winners []int
		for i, r := range rs {
			if r.wins[id] {
				winners = append(winners, i)
			}
		}
		if len(winners) != 1 {
			double++
			if double <= 5 {
				t.Errorf("%s: won by racers %v, want exactly one", id, winners)
			}
			continue
		}
		rd, _, err := st.Get(context.Background(), id, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rd)
		rd.Close()
		if want := fmt.Sprintf("racer %d", winners[0]); string(got) != want {
			t.Errorf("%s holds %q; its winner wrote %q", id, got, want)
		}
	}
	if double > 0 {
		t.Errorf("%d of %d sessions had other than one winner", double, ids)
	}
}

// TestFileStoreRacer is one racer of TestFileStoreAcrossProcesses, in a
// process of its own; run alone, it does nothing.
func TestFileStoreRacer(t *testing.T) {
	arg := os.Getenv(racerEnv)
	if arg == "" {
		t.Skip("a racer of TestFileStoreAcrossProcesses")
	}
	var dir string
	var me, ids int
	if _, err := fmt.Sscanf(arg, "%s %d %d", &dir, &me, &ids); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := sessionstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fmt.Println("ready")
	var b [1]byte
	os.Stdin.Read(b[:]) // go
	for n := range ids {
		id := fmt.Sprintf("race-%d", n)
		err := st.Put(ctx, id, sessionstore.Meta{Generation: 1}, 1<<20, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "racer %d", me)
			return err
		})
		switch {
		case err == nil:
			fmt.Println("won", id)
		case errors.Is(err, sessionstore.ErrConflict):
		default:
			t.Fatal(err)
		}
	}
}
