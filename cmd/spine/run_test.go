package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
)

// cliEnv makes the test binary be the spine command (see init): the tests
// below run it as a real subprocess, with its own stdin, stdout, stderr and
// exit code.
const cliEnv = "SPINE_TEST_CLI"

func init() {
	// The MCP test server first: started from a config file by a spine
	// subprocess, it inherits cliEnv too.
	spinetest.ServeMCPIfAsked()
	if os.Getenv(cliEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// spineCLI runs spine with args and stdin as a subprocess.
func spineCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1", "SPINE_CONFIG=")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{stdout.String(), stderr.String(), code}
}

func (r cliResult) check(t *testing.T, code int, stdout string, stderrHas ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if stdout != "*" && r.stdout != stdout {
		t.Errorf("stdout\n%q\nwant\n%q\nstderr:\n%s", r.stdout, stdout, r.stderr)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunFile(t *testing.T) {
	prog := writeFile(t, "prog.py", `print("price:", lookup(key="book"))
import sys
print("careful", file=sys.stderr)
{"total": lookup(key="book") * inputs["quantity"], "items": prices.list(limit=1)}
`)
	r := spineCLI(t, "", "run", "--demo-tools", "--inputs", `{"quantity": 3}`, prog)
	r.check(t, 0, "price: 21\n{\n  \"total\": 63,\n  \"items\": [\n    {\n      \"key\": \"pen\",\n      \"price\": 2\n    }\n  ]\n}\n")
	if r.stderr != "careful\n" {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestRunStdin(t *testing.T) {
	spineCLI(t, `result = lookup(key="pen") * 2`, "run", "--demo-tools", "-").check(t, 0, "4\n")
	// No FILE is standard input too; flags may follow FILE.
	spineCLI(t, `inputs["a"] + 1`, "run", "--inputs", `{"a": 1}`).check(t, 0, "2\n")
	spineCLI(t, `inputs["a"]`, "run", "-", "--inputs", `{"a": "x"}`).check(t, 0, "\"x\"\n")
}

func TestRunNoValue(t *testing.T) {
	// A program whose value is None prints only its output.
	spineCLI(t, "print('hi')\nx = 1\n", "run", "-").check(t, 0, "hi\n")
	// A value after output without a final newline is on its own line.
	spineCLI(t, "print('hi', end='')\n7\n", "run", "-").check(t, 0, "hi\n7\n")
}

// TestRunDisplay: a value without a JSON form prints as a notebook's Out[ ]
// shows it (its repr); display(x) prints x's text/plain where it is called.
// --json has the displays, each with every format.
func TestRunDisplay(t *testing.T) {
	const prog = "class P:\n    def __repr__(self):\n        return 'P(1)'\n    def _repr_html_(self):\n        return '<b>P</b>'\n" +
		"print('a')\ndisplay(P())\nprint('b', end='')\nP()\n"
	spineCLI(t, prog, "run", "-").check(t, 0, "a\nP(1)\nb\nP(1)\n")
	res := decodeJSON(t, spineCLI(t, prog, "run", "--json", "-"))
	want := map[string]string{"text/plain": "P(1)", "text/html": "<b>P</b>"}
	if string(res.Value) != "null" || !reflect.DeepEqual(res.Display, want) || len(res.Displayed) != 1 || !reflect.DeepEqual(res.Displayed[0], want) {
		t.Errorf("value %s, display %q, displayed %q", res.Value, res.Display, res.Displayed)
	}
	// A value with a JSON form prints as JSON, as it always did.
	spineCLI(t, "{'a': (1, True)}", "run", "-").check(t, 0, "{\n  \"a\": [\n    1,\n    true\n  ]\n}\n")
}

func TestRunInputsFile(t *testing.T) {
	inputs := writeFile(t, "inputs.json", `{"keys": ["book", "pen"]}`)
	spineCLI(t, `sum(lookup(key=k) for k in inputs["keys"])`, "run", "--demo-tools", "--inputs", "@"+inputs, "-").check(t, 0, "23\n")
}

func TestRunPythonError(t *testing.T) {
	prog := writeFile(t, "boom.py", "print('before')\ndef f():\n    return lookup(key='unicorn')\nf()\n")
	r := spineCLI(t, "", "run", "--demo-tools", prog)
	r.check(t, 1, "before\n", "Traceback (most recent call last):", `boom.py", line 4, in <module>`,
		`boom.py", line 3, in f`, `RuntimeError: no such key: "unicorn"`)
	if strings.Contains(r.stderr, "bootstrap") {
		t.Errorf("the traceback shows Guest internals:\n%s", r.stderr)
	}
	// A syntax error is a Python error too.
	spineCLI(t, "x = (\n", "run", "-").check(t, 1, "", "SyntaxError")
}

func TestRunTimeout(t *testing.T) {
	r := spineCLI(t, "print('started')\nwhile True:\n    pass\n", "run", "--timeout", "300ms", "-")
	r.check(t, 3, "started\n", "time limit of 300ms")
}

func TestRunUsage(t *testing.T) {
	prog := writeFile(t, "p.py", "1")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"run", "--nope", prog}, "flag provided but not defined"},
		{"two programs", []string{"run", prog, prog}, "one program at a time"},
		{"inputs not JSON", []string{"run", "--inputs", "{nope", prog}, "--inputs: not valid JSON"},
		{"inputs not an object", []string{"run", "--inputs", "[1]", prog}, "must be a JSON object"},
		{"inputs file missing", []string{"run", "--inputs", "@/no/such/file", prog}, "no such file"},
		{"bad timeout", []string{"run", "--timeout", "soon", prog}, "invalid value"},
		{"negative timeout", []string{"run", "--timeout", "-1s", prog}, "must not be negative"},
		{"no such program", []string{"run", "/no/such/prog.py"}, "no such file"},
		{"no such config", []string{"run", "--config", "/no/such/config.json", prog}, "config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spineCLI(t, "", c.args...).check(t, 2, "", c.want)
		})
	}
	r := spineCLI(t, "", "run", "-h")
	r.check(t, 0, "*")
	for _, s := range []string{"usage: spine run", "--inputs", "--early-reads", "--timeout", "--json", "--config", "--session", "3 time-out"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("help lacks %q", s)
		}
	}
}

// jsonResult decodes --json output.
type jsonResult struct {
	Value     json.RawMessage `json:"value"`
	Stdout    string          `json:"stdout"`
	Stderr    string          `json:"stderr"`
	ToolCalls int             `json:"tool_calls"`
	Calls     []struct {
		Tool       string `json:"tool"`
		StartNS    int64  `json:"start_ns"`
		DurationNS int64  `json:"duration_ns"`
		Early      bool   `json:"early"`
		Failed     bool   `json:"failed"`
	} `json:"calls"`
	ExitCode int `json:"exit_code"`
	Error    *struct {
		Kind, Type, Message, Traceback string
		Line                           int
	} `json:"error"`
	Timing struct {
		SetupMS float64 `json:"setup_ms"`
		RunMS   float64 `json:"run_ms"`
		TotalMS float64 `json:"total_ms"`
	} `json:"timing"`
	Session *struct {
		File            string
		Restored, Saved bool
		Note            string
	} `json:"session"`
	Files []struct {
		Name string `json:"name"`
		Data []byte `json:"data"`
	} `json:"files"`
	FilesLeftOut     int                 `json:"files_left_out"`
	Written          []string            `json:"written"`
	Display          map[string]string   `json:"display"`
	Displayed        []map[string]string `json:"displayed"`
	DisplayedLeftOut int                 `json:"displayed_left_out"`
}

func decodeJSON(t *testing.T, r cliResult) jsonResult {
	t.Helper()
	var res jsonResult
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("--json printed %q: %v", r.stdout, err)
	}
	if dec.More() {
		t.Fatalf("--json printed more than one object: %q", r.stdout)
	}
	if res.ExitCode != r.code {
		t.Errorf("exit_code %d, process exit %d", res.ExitCode, r.code)
	}
	return res
}

func TestRunJSON(t *testing.T) {
	r := spineCLI(t, "print('out')\nresult = [lookup(key='book'), None]\n", "run", "--json", "--demo-tools", "--early-reads", "-")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	res := decodeJSON(t, r)
	if compact(t, res.Value) != "[21,null]" {
		t.Errorf("value %s", res.Value)
	}
	if res.Stdout != "out\n" || res.Error != nil || res.ToolCalls != 1 {
		t.Errorf("result %+v", res)
	}
	if len(res.Calls) != 1 || res.Calls[0].Tool != "lookup" || res.Calls[0].Failed {
		t.Errorf("calls %+v", res.Calls)
	}
	if res.Timing.RunMS <= 0 || res.Timing.SetupMS <= 0 || res.Timing.TotalMS < res.Timing.RunMS+res.Timing.SetupMS-1 {
		t.Errorf("timing %+v", res.Timing)
	}

	r = spineCLI(t, "print('x')\n1/0\n", "run", "--json", "-")
	res = decodeJSON(t, r)
	if r.code != 1 || res.Error == nil || res.Error.Kind != "python" || res.Error.Type != "ZeroDivisionError" ||
		res.Error.Line != 2 || !strings.Contains(res.Error.Traceback, `File "<stdin>", line 2`) || res.Stdout != "x\n" || string(res.Value) != "null" {
		t.Errorf("python error: exit %d %+v %+v", r.code, res, res.Error)
	}

	r = spineCLI(t, "while True: pass", "run", "--json", "--timeout", "200ms", "-")
	res = decodeJSON(t, r)
	if r.code != 3 || res.Error == nil || res.Error.Kind != "timeout" {
		t.Errorf("timeout: exit %d %+v", r.code, res.Error)
	}
}

func compact(t *testing.T, raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRunTooLarge(t *testing.T) {
	// Past the source limit: not a usage error, not Python's: exit 4.
	big := "x = 1\n" + strings.Repeat("#", 1<<20)
	spineCLI(t, big, "run", "-").check(t, 4, "", "too large")
}

// TestRunSession: runs with one --session FILE share what their programs
// define; the state a Python error leaves is saved too; a program that ends
// the interpreter leaves FILE as it was.
func TestRunSession(t *testing.T) {
	file := filepath.Join(t.TempDir(), "work.session")
	spineCLI(t, "import math\nx = 40\ndef f():\n    return x + math.floor(2.5)\n", "run", "--session", file, "-").check(t, 0, "")
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the session file: %v, %v", info, err)
	}
	spineCLI(t, "f()", "run", "--session", file).check(t, 0, "42\n")

	spineCLI(t, "y = 1\nraise ValueError('boom')\n", "run", "--session", file).check(t, 1, "", "ValueError: boom")
	before := readFile(t, file)
	spineCLI(t, "import os\ny = 2\nos._exit(3)\n", "run", "--session", file).check(t, 1, "",
		"SystemExit", "the session was lost: "+file+" keeps its state from before the run")
	if !bytes.Equal(readFile(t, file), before) {
		t.Error("a lost session changed its file")
	}

	r := spineCLI(t, "[x, y]", "run", "--json", "--session", file)
	res := decodeJSON(t, r)
	if r.code != 0 || compact(t, res.Value) != "[40,1]" || res.Session == nil || res.Session.File != file || !res.Session.Restored || !res.Session.Saved {
		t.Errorf("--json: exit %d, value %s, session %+v", r.code, res.Value, res.Session)
	}
	if files, _ := os.ReadDir(filepath.Dir(file)); len(files) != 1 {
		t.Errorf("the folder holds %d files: temporary files were left", len(files))
	}
}

// TestRunSessionBad: a --session FILE that is not a session of these tools
// is a usage error and stays as it was.
func TestRunSessionBad(t *testing.T) {
	demo := filepath.Join(t.TempDir(), "demo.session")
	spineCLI(t, "x = 1", "run", "--demo-tools", "--session", demo).check(t, 0, "")
	damaged := readFile(t, demo)
	damaged[len(damaged)/2] ^= 1
	for _, c := range []struct {
		name  string
		data  []byte // nil: demo, unchanged
		wants []string
	}{
		{"not a snapshot", []byte(strings.Repeat("not a snapshot\n", 20)), []string{"not a Spine snapshot"}},
		{"short", []byte("x = 1\n"), []string{"too short for a snapshot"}},
		{"damaged", damaged, []string{"checksum mismatch"}},
		{"other tools", nil, []string{"another tool list"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := demo
			if c.data != nil {
				file = filepath.Join(t.TempDir(), "bad.session")
				if err := os.WriteFile(file, c.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before := readFile(t, file)
			wants := append([]string{"spine run: --session " + file + ": cannot restore the session, the file is left as it is"}, c.wants...)
			spineCLI(t, "x = 2", "run", "--session", file).check(t, 2, "", wants...)
			if !bytes.Equal(readFile(t, file), before) {
				t.Error("the file changed")
			}
		})
	}
	// A FILE that cannot be read is a usage error too.
	spineCLI(t, "1", "run", "--session", t.TempDir()).check(t, 2, "", "spine run: --session: ")
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRunFiles: --file places files in the working directory, --out writes
// back what the program made there, and never outside DIR nor through a
// symbolic link.
func TestRunFiles(t *testing.T) {
	in := writeFile(t, "data.csv", "a,b\n1,2\n")
	notes := writeFile(t, "n.txt", "notes")
	out := filepath.Join(t.TempDir(), "out")
	prog := `import os, csv
rows = list(csv.reader(open("data.csv")))
os.makedirs("report")
open("report/sum.txt", "w").write(str(sum(int(x) for x in rows[1])))
open("/tmp/scratch", "w").write("not in the working directory")
result = [rows[0], open("docs/notes.txt").read(), sorted(os.listdir("."))]`
	r := spineCLI(t, prog, "run", "--file", in, "--file", "docs/notes.txt="+notes, "--out", out, "-")
	r.check(t, 0, "[\n  [\n    \"a\",\n    \"b\"\n  ],\n  \"notes\",\n  [\n    \"data.csv\",\n    \"docs\",\n    \"report\"\n  ]\n]\n",
		"wrote "+filepath.Join(out, "report", "sum.txt")+" (1 bytes)")
	if got := string(readFile(t, filepath.Join(out, "report", "sum.txt"))); got != "3" {
		t.Fatalf("report/sum.txt = %q", got)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 1 {
		t.Fatalf("--out holds %d entries, want report only", len(entries))
	}

	// --json lists them; without --out they are only listed.
	r = spineCLI(t, `open("x.txt", "w").write("xyz")`, "run", "--json", "-")
	res := decodeJSON(t, r)
	if r.code != 0 || len(res.Files) != 1 || res.Files[0].Name != "x.txt" || string(res.Files[0].Data) != "xyz" || res.Written != nil {
		t.Fatalf("--json files: %+v", res.Files)
	}

	// A symbolic link in DIR is not written through.
	outside := t.TempDir()
	trap := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(trap, "report")); err != nil {
		t.Fatal(err)
	}
	spineCLI(t, `import os; os.mkdir("report"); open("report/x", "w").write("x")`, "run", "--out", trap, "-").
		check(t, 4, "", "symbolic link")
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatal("a file was written through a symbolic link")
	}

	// Bad --file names and missing files are usage errors.
	spineCLI(t, "1", "run", "--file", "../up="+in, "-").check(t, 2, "", "not clean")
	spineCLI(t, "1", "run", "--file", "/abs="+in, "-").check(t, 2, "", "absolute")
	spineCLI(t, "1", "run", "--file", filepath.Join(t.TempDir(), "missing"), "-").check(t, 2, "", "--file")
}

// TestRunPrintsAsItGoes: spine run, a real process, prints a line as soon as
// the program prints it; the program then sleeps until interrupted, so the
// line can only have come while it ran.
func TestRunPrintsAsItGoes(t *testing.T) {
	prog := writeFile(t, "p.py", "print('first \\u00e9')\nimport time\ntime.sleep(3600)\n")
	cmd := exec.Command(os.Args[0], "run", prog)
	cmd.Env = append(os.Environ(), cliEnv+"=1", "SPINE_CONFIG=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "first \u00e9\n" {
		cmd.Process.Kill()
		t.Fatalf("read %q, %v", line, err)
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != exitFailure || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("%v; stderr:\n%s", err, stderr.String())
	}
}
