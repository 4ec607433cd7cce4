package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTerminalText(t *testing.T) {
	const same = "\x00same" // want the input back
	for _, c := range []struct{ in, text, json string }{
		{"plain text, ünïcode ✓, \\x1b as text\tand a tab\n", same, same},
		{"\u00a0no-break space, ÿ, \ufffd, 😀", same, same},
		{"windows\r\nline endings\r\n", same, same},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\u001b[31mred\u001b[0m`},
		{"\x1b[2J\x1b[H\x1b[1A\x1b[K", `\x1b[2J\x1b[H\x1b[1A\x1b[K`, `\u001b[2J\u001b[H\u001b[1A\u001b[K`},
		// OSC 52: set the clipboard, ended by BEL or by ST.
		{"\x1b]52;c;ZWNobyBwd25lZA==\x07", `\x1b]52;c;ZWNobyBwd25lZA==\x07`, `\u001b]52;c;ZWNobyBwd25lZA==\u0007`},
		{"\x1b]52;c;ZWNobyBwd25lZA==\x1b\\", `\x1b]52;c;ZWNobyBwd25lZA==\x1b\`, `\u001b]52;c;ZWNobyBwd25lZA==\u001b\`},
		{"\x1b]0;title\x07\x1bP+q\x1b\\", `\x1b]0;title\x07\x1bP+q\x1b\`, `\u001b]0;title\u0007\u001bP+q\u001b\`},
		// C1 controls: CSI, OSC and ST as characters, and as bytes that are not UTF-8.
		{"\u009b2J\u009d0;title\u009c", `\x9b2J\x9d0;title\x9c`, `\u009b2J\u009d0;title\u009c`},
		{"\u0080\u0085\u009f", `\x80\x85\x9f`, `\u0080\u0085\u009f`},
		{"a\x9b2Jb", `a\x9b2Jb`, `a\ufffd2Jb`},
		{"\xc2", `\xc2`, `\ufffd`},
		{"\xed\xa0\x80", `\xed\xa0\x80`, `\ufffd\ufffd\ufffd`},
		{"done 10%\rdone 20%", `done 10%\rdone 20%`, `done 10%\u000ddone 20%`},
		{"\r", `\r`, `\u000d`},
		{"line\r\n\r", "line\r\n" + `\r`, "line\r\n" + `\u000d`},
		{"\r\r\n", `\r` + "\r\n", `\u000d` + "\r\n"},
		{"\x00\x07\x08\x0b\x0c\x7f", `\x00\x07\x08\x0b\x0c\x7f`, `\u0000\u0007\u0008\u000b\u000c\u007f`},
		{"", same, same},
	} {
		for _, m := range []struct {
			name string
			f    func(string) string
			want string
		}{{"text", terminalText, c.text}, {"json", terminalJSON, c.json}} {
			want := m.want
			if want == same {
				want = c.in
			}
			if got := m.f(c.in); got != want {
				t.Errorf("%s(%q) = %q, want %q", m.name, c.in, got, want)
			}
		}
	}
}

// terminalSafe reports whether a terminal shown s obeys nothing in it: s is
// UTF-8 without C0 controls other than \n, \t and a \r before \n, and
// without DEL or C1 controls.
func terminalSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r == '\r':
			if !strings.HasPrefix(s[i+1:], "\n") {
				return false
			}
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return false
		}
	}
	return true
}

func FuzzTerminalText(f *testing.F) {
	for _, s := range []string{
		"plain\n", "\x1b[31mred", "\x1b]52;c;SGk=\x07", "\u009b2J", "a\x9bb", "a\rb\r\n", "\xed\xa0\x80",
		`{"v": "\u001b[1m` + "\u009b\"}", "[1, \"\xff\"]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		text, js := terminalText(s), terminalJSON(s)
		for _, out := range []string{text, js} {
			if !terminalSafe(out) {
				t.Fatalf("%q became %q", s, out)
			}
			if strings.Contains(out, "\x1b") {
				t.Fatalf("%q became %q, with ESC", s, out)
			}
		}
		if terminalSafe(s) && (text != s || js != s) {
			t.Fatalf("safe %q changed: %q, %q", s, text, js)
		}
		// JSON stays JSON of the same value (a raw \r, valid only between
		// tokens, may not stay valid).
		if json.Valid([]byte(s)) && !strings.Contains(s, "\r") {
			var before, after any
			if err := json.Unmarshal([]byte(js), &after); err != nil {
				t.Fatalf("%q became %q: %v", s, js, err)
			}
			json.Unmarshal([]byte(s), &before)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("%q became %q: %v, was %v", s, js, after, before)
			}
		}
	})
}

// fakeTerminal is a writer that says it is a terminal.
type fakeTerminal struct{ bytes.Buffer }

func (*fakeTerminal) IsTerminal() bool { return true }

// hostileProgram prints escape sequences and controls of every kind, to
// standard output and standard error, as text and as bytes.
const hostileProgram = `import sys, os
print("red \x1b[31mtext\x1b[0m clip \x1b]52;c;SGVsbG8=\x07 c1 \x9b2J cr\rover crlf\r")
sys.stdout.flush()
os.write(1, b"byte \x9b\n")
print("err \x1b[2J", file=sys.stderr)
{"v": "\x1b[1m\x9b"}
`

// hostileOut is hostileProgram's standard output as it wrote it.
const hostileOut = "red \x1b[31mtext\x1b[0m clip \x1b]52;c;SGVsbG8=\x07 c1 \u009b2J cr\rover crlf\r\n" +
	"byte \x9b\n" +
	"{\n  \"v\": \"\\u001b[1m\u009b\"\n}\n"

// TestRunTerminal: spine run neutralizes what the program prints on the
// streams that are terminals, and on no other, nor with --raw.
func TestRunTerminal(t *testing.T) {
	const (
		safeOut = `red \x1b[31mtext\x1b[0m clip \x1b]52;c;SGVsbG8=\x07 c1 \x9b2J cr\rover crlf` + "\r\n" +
			`byte \x9b` + "\n" +
			"{\n  \"v\": \"\\u001b[1m\\u009b\"\n}\n"
		safeErr = `err \x1b[2J` + "\n"
		rawErr  = "err \x1b[2J\n"
	)
	for _, c := range []struct {
		name             string
		args             []string
		outTerm, errTerm bool
		wantOut, wantErr string
	}{
		{"terminals", nil, true, true, safeOut, safeErr},
		{"pipes", nil, false, false, hostileOut, rawErr},
		{"--raw", []string{"--raw"}, true, true, hostileOut, rawErr},
		{"stdout a terminal", nil, true, false, safeOut, rawErr},
		{"stderr a terminal", nil, false, true, hostileOut, safeErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr := writer(c.outTerm), writer(c.errTerm)
			code := runCommand(append(c.args, "-"), strings.NewReader(hostileProgram), stdout, stderr)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := stdout.(interface{ String() string }).String(); got != c.wantOut {
				t.Errorf("stdout\n%q\nwant\n%q", got, c.wantOut)
			}
			if got := stderr.(interface{ String() string }).String(); got != c.wantErr {
				t.Errorf("stderr\n%q\nwant\n%q", got, c.wantErr)
			}
		})
	}
}

func writer(terminal bool) interface {
	Write([]byte) (int, error)
	String() string
} {
	if terminal {
		return &fakeTerminal{}
	}
	return &bytes.Buffer{}
}

// TestRunTerminalErrors: a Python exception's message and the traceback's
// lines come from the program too.
func TestRunTerminalErrors(t *testing.T) {
	src := "def f():\n    raise ValueError('\\x1b]52;c;SGVsbG8=\\x07 \\x9b boom')\nf()\n"
	var stdout, stderr fakeTerminal
	if code := runCommand([]string{"-"}, strings.NewReader(src), &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !terminalSafe(stderr.String()) || !strings.Contains(stderr.String(), `ValueError: \x1b]52;c;SGVsbG8=\x07 \x9b boom`) {
		t.Errorf("stderr %q", stderr.String())
	}
	var raw bytes.Buffer
	runCommand([]string{"-"}, strings.NewReader(src), &stdout, &raw)
	if !strings.Contains(raw.String(), "ValueError: \x1b]52;c;SGVsbG8=\x07 \u009b boom") {
		t.Errorf("stderr, a pipe: %q", raw.String())
	}
}

// TestRunTerminalJSON: --json to a terminal escapes the controls JSON leaves
// raw (DEL, C1) the JSON way: the same object, safe to show.
func TestRunTerminalJSON(t *testing.T) {
	var term fakeTerminal
	var pipe bytes.Buffer
	for _, w := range []interface{ Write([]byte) (int, error) }{&term, &pipe} {
		var stderr bytes.Buffer
		if code := runCommand([]string{"--json", "-"}, strings.NewReader(hostileProgram), w, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	}
	if !terminalSafe(term.String()) {
		t.Errorf("--json to a terminal: %q", term.String())
	}
	var a, b map[string]any
	if err := json.Unmarshal(term.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(pipe.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	delete(a, "timing")
	delete(b, "timing")
	if !reflect.DeepEqual(a, b) {
		t.Errorf("terminal %v\npipe %v", a, b)
	}
	if want := strings.ToValidUTF8(strings.SplitAfter(hostileOut, "\n")[0]+"byte \x9b\n", "\ufffd"); a["stdout"] != want {
		t.Errorf("stdout %q, want %q", a["stdout"], want)
	}
}

// TestRunPipedUnchanged: a real spine process writing to pipes prints the
// program's bytes as they are.
func TestRunPipedUnchanged(t *testing.T) {
	r := spineCLI(t, hostileProgram, "run", "-")
	r.check(t, 0, hostileOut)
	if r.stderr != "err \x1b[2J\n" {
		t.Errorf("stderr %q", r.stderr)
	}
}

// TestStreamWriter: a chunk that ends inside a character or a "\r\n" is
// neutralized as if it had come in one piece.
func TestStreamWriter(t *testing.T) {
	var b strings.Builder
	w := newStreamWriter(&b, terminalText)
	for _, chunk := range []string{"a\r", "\nb\xc3", "\xa9\x1b[2J", "\r"} {
		w.Write([]byte(chunk))
	}
	if ended := w.flush(); ended {
		t.Fatal("the output does not end a line")
	}
	if want := "a\r\nb\u00e9\\x1b[2J\\r"; b.String() != want {
		t.Fatalf("%q, want %q", b.String(), want)
	}
}

// FuzzStreamWriter: the program's output, cut into chunks anywhere, is
// neutralized exactly as in one piece.
func FuzzStreamWriter(f *testing.F) {
	f.Add([]byte("a\r\nb\xc3\xa9\x1b[2J\r"), uint8(2))
	f.Add([]byte("\xf0\x9f\x98\x80\r\r\n\xe2\x82"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		n := int(step%7) + 1
		var b strings.Builder
		w := newStreamWriter(&b, terminalText)
		for i := 0; i < len(data); i += n {
			w.Write(data[i:min(i+n, len(data))])
		}
		ended := w.flush()
		if want := terminalText(string(data)); b.String() != want {
			t.Fatalf("chunks of %d: %q, in one piece %q", n, b.String(), want)
		}
		if ended != (len(data) == 0 || data[len(data)-1] == '\n') {
			t.Fatalf("line ended %v for %q", ended, data)
		}
	})
}
