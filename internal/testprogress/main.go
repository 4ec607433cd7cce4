// Command testprogress runs go test with -json and prints its progress as it
// goes: one line per package when it ends (go test's own closing "ok",
// "FAIL" or "?" line), one line per top-level test that took a second or
// more, and the whole output of every test that failed, and of every build
// that failed. When something failed, its last lines name every failed test
// and package again, so that the tail of a long log says what failed. It
// exits with go test's exit code (1 if go test said a test failed and yet
// exited 0).
//
//	go run ./internal/testprogress go test -json -short ./...
//
// The command is run as given: it must include -json. Its standard error
// passes through.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testprogress go test -json [flags] [packages]")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args and reports its progress to w; it returns the
// exit code.
func run(args []string, w, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testprogress: %v\n", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testprogress: %v\n", err)
		return 1
	}
	p := newProgress(w)
	p.read(out)
	err = cmd.Wait()
	p.summary()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "testprogress: %v\n", err)
		return 1
	case p.failed:
		fmt.Fprintln(stderr, "testprogress: a test failed, yet go test exited 0")
		return 1
	}
	return 0
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail events
}

// slowTest is how long a top-level test must take to get a line of its own.
const slowTest = time.Second

// progress turns events into lines.
type progress struct {
	w      io.Writer
	start  time.Time
	output map[string][]string // a running top-level test's output, its subtests' included, by package and test
	failed bool
	fails  []string // what failed, in order: "package Test" or a package alone
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, start: time.Now(), output: map[string][]string{}}
}

// read reports the events of r until it ends. A line that is not an event
// (go test's -json is not on, or something printed around it) is printed as
// it is.
func (p *progress) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(p.w, "%s\n", line)
			continue
		}
		p.event(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(p.w, "testprogress: reading go test's output: %v\n", err)
		p.failed = true
	}
}

func (p *progress) event(e event) {
	top, _, _ := strings.Cut(e.Test, "/")
	key := e.Package + " " + top // a subtest's output goes with its top-level test's
	switch e.Action {
	case "build-output":
		fmt.Fprint(p.w, e.Output)
	case "build-fail":
		p.failed = true
		p.fails = append(p.fails, e.ImportPath+" (build)")
	case "output":
		if e.Test != "" {
			p.output[key] = append(p.output[key], e.Output)
			return
		}
		// A package's own lines: keep go test's closing ok/FAIL/? line and
		// anything it printed outside a test, not the bare PASS/FAIL.
		if out := strings.TrimSpace(e.Output); out != "PASS" && out != "FAIL" && out != "" {
			fmt.Fprintf(p.w, "%s %s", p.clock(), e.Output)
		}
	case "pass", "skip":
		if e.Test == "" || e.Test != top {
			return
		}
		delete(p.output, key)
		if e.Action == "pass" && e.Elapsed >= slowTest.Seconds() {
			fmt.Fprintf(p.w, "%s   pass %s %s (%.1fs)\n", p.clock(), e.Package, e.Test, e.Elapsed)
		}
	case "fail":
		p.failed = true
		if e.Test == "" || e.Test == top {
			p.fails = append(p.fails, strings.TrimSpace(e.Package+" "+e.Test))
		}
		switch {
		case e.Test == "":
			// The package failed: whatever its unfinished tests printed (a
			// time-out's panic, say) is why.
			for k, lines := range p.output {
				if strings.HasPrefix(k, e.Package+" ") {
					fmt.Fprintf(p.w, "%s   FAIL %s %s (did not finish)\n", p.clock(), e.Package, strings.TrimPrefix(k, e.Package+" "))
					p.dump(k, lines)
				}
			}
		case e.Test == top:
			fmt.Fprintf(p.w, "%s   FAIL %s %s (%.1fs)\n", p.clock(), e.Package, e.Test, e.Elapsed)
			p.dump(key, p.output[key])
		}
	}
}

// summary names again everything that failed, if anything did.
func (p *progress) summary() {
	if len(p.fails) == 0 {
		return
	}
	fmt.Fprintf(p.w, "%s failed:\n", p.clock())
	for _, f := range p.fails {
		fmt.Fprintf(p.w, "    %s\n", f)
	}
}

// dump prints a test's output, indented, and forgets it.
func (p *progress) dump(key string, lines []string) {
	for _, l := range lines {
		fmt.Fprint(p.w, "        "+l)
	}
	delete(p.output, key)
}

// clock is the time since the start, as [m:ss].
func (p *progress) clock() string {
	d := time.Since(p.start).Round(time.Second)
	return fmt.Sprintf("[%d:%02d]", int(d.Minutes()), int(d.Seconds())%60)
}
