package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY returns a new pseudo-terminal's two ends.
func openPTY(t *testing.T) (master, terminal *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return master, terminal
}

// TestRunRealTerminal: a spine process whose standard output is a terminal
// neutralizes what the program prints there; its standard error, a pipe,
// gets the bytes as they are.
func TestRunRealTerminal(t *testing.T) {
	master, terminal := openPTY(t)
	if !isTerminal(terminal) {
		t.Fatal("a pseudo-terminal is not a terminal")
	}
	r, w, _ := os.Pipe()
	defer r.Close()
	if isTerminal(w) {
		t.Fatal("a pipe is a terminal")
	}
	w.Close()

	cmd := exec.Command(os.Args[0], "run", "-")
	cmd.Env = append(os.Environ(), cliEnv+"=1", "SPINE_CONFIG=")
	cmd.Stdin = strings.NewReader("import sys\nprint('\\x1b]52;c;SGVsbG8=\\x07 \\x1b[2J\\x9b')\nprint('\\x1b[31m', file=sys.stderr)\n")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = terminal, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	terminal.Close()
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(master) // EIO once the process has closed the terminal
		read <- b
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	shown := strings.ReplaceAll(string(<-read), "\r\n", "\n") // the terminal's own line endings
	if want := `\x1b]52;c;SGVsbG8=\x07 \x1b[2J\x9b` + "\n"; shown != want {
		t.Errorf("the terminal shows %q, want %q", shown, want)
	}
	if stderr.String() != "\x1b[31m\n" {
		t.Errorf("stderr %q", stderr.String())
	}
}

// TestRunStdinTerminalNotice: spine run with no file and a terminal on
// standard input says it is reading the program there before it waits; the
// program typed after the notice runs. Standard input from a pipe gets no
// notice (TestRunStdin and the others).
func TestRunStdinTerminalNotice(t *testing.T) {
	master, terminal := openPTY(t)
	cmd := exec.Command(os.Args[0], "run")
	cmd.Env = append(os.Environ(), cliEnv+"=1", "SPINE_CONFIG=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdin, cmd.Stdout = terminal, &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	terminal.Close()
	go io.Copy(io.Discard, master) // the terminal's echo
	lines := bufio.NewReader(stderr)
	notice, err := lines.ReadString('\n') // the gate: nothing is typed before it
	if err != nil {
		t.Fatal(err)
	}
	if want := "spine run: reading the program from standard input; end it with Ctrl-D\n"; notice != want {
		t.Fatalf("stderr begins %q, want %q", notice, want)
	}
	if _, err := master.Write([]byte("result = 6 * 7\n\x04")); err != nil { // Ctrl-D at a line's start: end of input
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(lines)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, rest)
	}
	if stdout.String() != "42\n" || len(rest) != 0 {
		t.Fatalf("stdout %q, stderr after the notice %q", stdout.String(), rest)
	}
}
