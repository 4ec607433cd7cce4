package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The Guest compiles a program in one of two ways (guest/python/bootstrap.py, _run):
// in C on the parser's own tree (_spine.compile_program), or through a Python AST,
// the way it takes when early reads are on or Request.Transformed asks for the
// rewritten source. Both must give the same run: value, output, warnings, syntax
// errors, tracebacks. Transformed, with early reads off, changes nothing but the
// path, so a run with it and one without compare the two.

// lastExprPrograms are programs whose last statement, syntax or layout is an edge of
// "the last top-level expression is the value".
var lastExprPrograms = []string{
	"",
	"\n",
	"   \n\n",
	"# only a comment",
	"# only a comment\n",
	"1",
	"1\n",
	"1 + 2",
	"x = 1",
	"x = 1\nx",
	"x = 1\nx\n\n\n",
	"x = 1\nx  # the value\n# trailing comment\n",
	"x = 1\nx\n    \n\t\n",
	"x = 3; x * 2",
	"x = 3; y = 4",
	"x = 3; x; y = 1",
	"1; 2; 3",
	"1;",
	"if True:\n    5\n",
	"if False:\n    5\nelse:\n    6",
	"for i in range(3):\n    i\n",
	"while False:\n    pass\n7",
	"def f():\n    return 4\nf()",
	"def f():\n    return 4\n",
	"@staticmethod\ndef f():\n    pass\n",
	"def deco(f):\n    return f\n@deco\ndef g():\n    return 9\ng()",
	"class C:\n    x = 2\nC.x",
	"class C:\n    'doc'\nC.__doc__",
	"'only a docstring'",
	"'''a docstring'''\nx = 1",
	"'''a docstring'''\n__doc__",
	"'''a docstring'''\nx = 1\nx",
	"from __future__ import annotations\ndef f(x: Undefined) -> Nope:\n    return 1\nf.__annotations__",
	"from __future__ import annotations\nx: Undefined = 1\n__annotations__",
	"from __future__ import annotations\n1",
	"from __future__ import barry_as_FLUFL\n1 <> 2",
	"1 <> 2",
	"from __future__ import braces",
	"from __future__ import nonexistent_feature",
	"x = 1\nfrom __future__ import annotations",
	"'doc'\nfrom __future__ import annotations\n3",
	"x: int = 5\n__annotations__",
	"x: int\n__annotations__",
	"result = 11",
	"result = 11\n12",
	"12\nresult = 11",
	"del_me = 1\ndel del_me",
	"x = [1, 2]\ndel x[0]\nx",
	"(y := 10)",
	"(y := 10)\ny + 1",
	"a, *b = [1, 2, 3]\nb",
	"[*range(3)]",
	"{**{'a': 1}, 'b': 2}",
	"lambda: 1",
	"(lambda: 1)()",
	"[i * i for i in range(4)]",
	"{i: str(i) for i in range(3)}",
	"sum(i for i in range(10))",
	"f'{1 + 1}'",
	"f'{\"nested\"!r:>10}'",
	"b'bytes'.decode()",
	"1 if True else 2",
	"not True",
	"-(-(-(-1)))",
	"~~~~~~5",
	"print('side effect')",
	"print('a')\nprint('b')",
	"print('out')\n1/0",
	"1/0",
	"x = 1\n\n\n1/0\n",
	"def f():\n    return 1/0\nf()",
	"def f():\n    return 1/0\nx = 1\nf()",
	"raise ValueError('boom')",
	"import sys\nsys.stderr.write('to stderr\\n')",
	"await something",
	"async def f():\n    return 1\nawait f()",
	"x = 1\nawait x",
	"print('ran first')\nawait x",
	"yield 1",
	"return 5",
	"break",
	"x = (",
	"x = )",
	"1 +",
	"if True:\nprint(1)",
	"if True:\n    1\n  2",
	"  1",
	"x = 1\n    y = 2",
	"\t1",
	"def f():\n\tif True:\n        return 1\n",
	"x = 1\r\nx + 1\r\n",
	"x = 1\rx",
	"x = 1\r\ny = 2\r\n1/0\r\n",
	"# -*- coding: latin-1 -*-\n'é'",
	"# -*- coding: nonsense -*-\n1",
	"'naïve ☃'",
	"x = '\\N{SNOWMAN}'\nx",
	"'\\d'",
	"x = '\\d'\nx",
	"print('first')\n'\\d'",
	"1 is 1",
	"x = 1\nx is 1",
	"print('first')\nx = 1\nx is 1",
	"print('first')\nx = 1\nif x is 1: pass",
	"assert (1, 'always true')",
	"print('before')\n1 is ()",
	"x = 1\nx()",
	"print('first')\n[1, 2](3)",
	"import warnings\nwarnings.warn('careful')\n2",
	"'unterminated",
	"'''unterminated\n",
	"x = 1\n'\\N{NOT A NAME}'",
	"\x00",
	"x = 1\x00",
	"(" + strings.Repeat("[", 120) + strings.Repeat("]", 120) + ")",
	strings.Repeat("(", 250) + "1" + strings.Repeat(")", 250),
	"x = 1\n" + strings.Repeat("-", 2000) + "x",
	strings.Repeat("-", 5000) + "1",
	"x = 0\n" + strings.Repeat("x = x + 1\n", 600) + "x",
	"1" + strings.Repeat(" + 1", 3000),
	"'" + strings.Repeat("long ", 20000) + "'.count('long')",
	"x = " + strings.Repeat("1 + ", 400) + "1\nx",
	"def f(n):\n    try:\n        return 1 / n\n    except ZeroDivisionError as e:\n        return str(e)\n" +
		strings.Repeat("y = f(1)\n", 100) + "match y:\n    case 1.0 if y > 0:\n        z = 'one'\n    case _:\n        z = 'other'\n" +
		"@staticmethod\ndef g(): pass\nclass C:\n    " + strings.Repeat("a = 1\n    ", 50) + "\n(f(0), z, C.a)",
	strings.Repeat("if True:\n    x = 1\nelse:\n    x = 2\n", 60) + "for i in range(3):\n    pass\nelse:\n    x += i\nx\n1/0",
	strings.Repeat("print('line')\n", 100) + "while False:\n    pass\n'\\d' is 'x'",
	strings.Repeat("x = 1\n", 100) + "if True:\n    y = " + strings.Repeat("-", 300) + "1\ny",
	strings.Repeat("x = 1\n", 100) + "x = " + strings.Repeat("-", 700) + "1\nx",
	"match 3:\n    case 1:\n        'one'\n    case _:\n        'other'\n",
	"match 3:\n    case 1:\n        x = 'one'\n    case _:\n        x = 'other'\nx",
	"try:\n    1/0\nexcept ZeroDivisionError:\n    'caught'\n",
	"try:\n    1/0\nexcept ZeroDivisionError as e:\n    err = str(e)\nerr",
	"with open('f.txt', 'w') as f:\n    f.write('hi')\nopen('f.txt').read()",
	"global g\ng = 1\ng",
	"nonlocal x",
	"import math\nmath.pi",
	"import json\njson.dumps([1, 2])",
	"inputs",
	"lookup(key='book') * 3",
	"v = lookup(key='book')\nv",
	"lookup(key='missing')",
	"lookup('positional')",
	"object()",
	"x = set()\nx",
	"__name__",
	"__file__",
	"__builtins__.__name__",
	"locals() is globals()",
	"import sys\nsys._getframe().f_code.co_filename",
	"import sys\nsys._getframe().f_lineno",
	"import sys\nsys._getframe().f_code.co_flags & 0x1000000",
	"import sys\n(sys._getframe().f_code.co_name, sys._getframe().f_code.co_firstlineno)",
	"import sys\nf = sys._getframe()\nf.f_code.co_firstlineno",
	"\n\n\nimport sys\nsys._getframe().f_lineno",
	"exit(0)",
	"quit(3)",
	"raise SystemExit('bye')",
	"import sys\nsys.exit(2)",
	"raise KeyboardInterrupt",
	"def f(): f()\nf()",
	"import traceback\ntry:\n    1/0\nexcept Exception:\n    s = traceback.format_exc()\ns",
	"import sys\nsys.addaudithook(lambda e, a: None)\n1",
	"import sys\nsys.addaudithook(lambda e, a: print(e) if e in ('compile', 'exec') else None)\nexec('1')\n2",
	"compile('1 +', 'inner', 'exec')",
	"eval('1 + 1')",
	"exec('y = 2')\ny",
	"import dis\nimport io\nbuf = io.StringIO()\ndis.dis(compile('a = 1', 'x', 'exec'), file=buf)\nbuf.getvalue()",
	"x = 1 \\\n + 2\nx",
	"1 \\\n + 2",
	"(1 +\n 2)",
	"[\n    1,\n    2,\n]",
	"x = 1; \\\n x",
	"if 1: x = 2\nx",
	"if 1: 2",
	"def f(): return 3\nf()",
	"result = None\n5",
	"import __main__\n__main__.__dict__ is globals()",
	"print(end='no newline')",
	"print(1, 2, sep='-')\nNone",
	"...",
	"Ellipsis",
	"__debug__",
	"x = 1\nglobal x",
	"def f():\n    x = 1\n    global x\n",
	"def f(a, a): pass",
	"f(x for x in y, 1)",
	"a = 1\na = 2 = 3",
	"True = 1",
	"x += 1",
	"print(undefined_name)",
	"'a' + 1",
	"{}['missing']",
	"[][0]",
	"import nonexistent_module",
	"int('x')",
	"class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E",
	"0x_",
	"1_000",
	"0777",
	"1e",
	"\"\"\"doc\"\"\"\n'''value'''",
	"print('x')\n(1,\n 2)\n",
	// The program lowers the recursion limit below what its last expression needs
	// once the rest has run: compile_last checks the depth again.
	"import sys\nsys.setrecursionlimit(60)\n" + strings.Repeat("-", 150) + "1",
	"import sys\nsys.setrecursionlimit(60)\n" + strings.Repeat("-", 20) + "1",
	// A gc callback reaches the pending expression through the frames and compiles it
	// again while it is being compiled (folded in place): refused, never re-entered.
	"import gc, sys, _spine\nseen = []\ndef cb(phase, info):\n    f = sys._getframe(1)\n" +
		"    while f is not None and 'pending' not in f.f_locals:\n        f = f.f_back\n" +
		"    if f is not None:\n        try:\n            _spine.compile_last(f.f_locals['pending'])\n" +
		"        except RuntimeError:\n            pass\n" +
		"gc.callbacks.append(cb)\ngc.set_threshold(1)\n-(-(+(-(~(1 + 2 * 3)))))[0:1] if False else -(-(+(-(~(1 + 2 * 3)))))",
}

// deepPrograms nest expressions about as deep as the Guest's recursion limit (600),
// where the Python path starts failing with RecursionError, after enough lines that
// compile_program has to bound the depth from the statement's length.
func deepPrograms() []string {
	prefix := strings.Repeat("a = 1\n", 100) + "def f(*args):\n    return f\nclass O:\n    pass\no = O()\no.o = o\nl = [0]\nl[0] = l\n"
	var programs []string
	for _, depth := range []int{50, 100, 120, 200, 250, 300, 450, 590, 600, 610, 1000} {
		for _, expr := range []string{
			strings.Repeat("-", depth) + "1",
			"o" + strings.Repeat(".o", depth),
			"f" + strings.Repeat("()", depth),
			"l" + strings.Repeat("[0]", depth),
			strings.Repeat("not ", depth) + "a",
			"1" + strings.Repeat(" + 1", depth),
			strings.Repeat("lambda: ", depth) + "1",
			strings.Repeat("(", min(depth, 199)) + "1" + strings.Repeat(")", min(depth, 199)),
		} {
			programs = append(programs, prefix+"x = "+expr+"\nx is not None", prefix+"if a:\n    y = "+expr+"\n'y' in globals()")
		}
	}
	return programs
}

func TestLastExpressionDeep(t *testing.T) {
	r := shared(t)
	for i, src := range deepPrograms() {
		fast := lastExprRun(t, r, src, "", false)
		slow := lastExprRun(t, r, src, "", true)
		if fast != slow {
			t.Errorf("program %d %.80q...%.40q:\nC path:\n%s\nPython path:\n%s", i, src[:80], src[len(src)-40:], fast, slow)
		}
	}
}

// lastExprRun runs src with the C compile path (transformed false) or the Python AST
// path (transformed true) and describes everything a caller sees but Transformed.
func lastExprRun(t testing.TB, r *spine.Runner, src, filename string, transformed bool) string {
	t.Helper()
	return lastExprRequest(r, spine.Request{Source: src, Filename: filename, Transformed: transformed})
}

func lastExprRequest(r *spine.Runner, req spine.Request) string {
	out, err := r.Run(context.Background(), req)
	var b strings.Builder
	if out != nil {
		fmt.Fprintf(&b, "value %s\nstdout %q\nstderr %q\ncalls %d\n", out.Value, out.Stdout, out.Stderr, out.ToolCalls)
	}
	var pe *spine.PythonError
	if errors.As(err, &pe) {
		fmt.Fprintf(&b, "error %s: %q (line %d)\n%s", pe.Type, pe.Message, pe.Line, pe.Traceback)
	} else if err != nil {
		fmt.Fprintf(&b, "not a Python error: %v\n", err)
	}
	return b.String()
}

func TestLastExpressionPaths(t *testing.T) {
	r := shared(t)
	for i, src := range lastExprPrograms {
		for _, filename := range []string{"", "prog.py"} {
			fast := lastExprRun(t, r, src, filename, false)
			slow := lastExprRun(t, r, src, filename, true)
			if fast != slow {
				t.Errorf("program %d %.80q (filename %q):\nC path:\n%s\nPython path:\n%s", i, src, filename, fast, slow)
			}
			if strings.Contains(fast, "unable to report its outcome") {
				t.Errorf("program %d %.80q: the Guest failed: %s", i, src, fast)
			}
		}
	}
}

// TestLastExpressionFastPath: a run without early reads or Transformed compiles in C
// (bootstrap._run's frame then has compile_program's code), unless a statement is
// long enough to nest deeper than the recursion headroom; with Transformed it takes
// the Python AST path.
func TestLastExpressionFastPath(t *testing.T) {
	r := shared(t)
	probe := "import sys\ntype(sys._getframe().f_back.f_locals.get('compiled')) is tuple"
	for _, c := range []struct {
		req  spine.Request
		want string
	}{
		{spine.Request{Source: probe}, "true"},
		{spine.Request{Source: probe, Filename: "p.py"}, "true"},
		{spine.Request{Source: probe, Transformed: true}, "false"},
		{spine.Request{Source: probe, EarlyReads: true}, "false"},
		{spine.Request{Source: strings.Repeat("\n", 5000) + probe}, "true"},
		{spine.Request{Source: strings.Repeat("x = 1\n", 2000) + probe}, "true"},
		{spine.Request{Source: "def f():\n    " + strings.Repeat("x = 1; ", 200) + "\n" + probe}, "true"},
		{spine.Request{Source: strings.Repeat("x = 1\n", 100) + "x = " + strings.Repeat("-", 400) + "1\n" + probe}, "false"},
	} {
		out, err := r.Run(context.Background(), c.req)
		if err != nil {
			t.Fatal(err)
		}
		if string(out.Value) != c.want {
			t.Errorf("transformed %v, early reads %v, %d bytes: %s, want %s",
				c.req.Transformed, c.req.EarlyReads, len(c.req.Source), out.Value, c.want)
		}
	}
}

// TestLastExpressionValues pins what a few programs give, so that both paths agreeing
// on something wrong does not pass.
func TestLastExpressionValues(t *testing.T) {
	r := shared(t)
	for _, c := range []struct{ src, want string }{
		{"x = 3; x * 2", "6"},
		{"x = 1\nx  # the value\n# trailing comment\n", "1"},
		{"'only a docstring'", `"only a docstring"`},
		{"if True:\n    5\n", "null"},
		{"result = 11\n12", "11"},
		{"print('a')\n1", "1"},
		{"from __future__ import annotations\nx: Undefined = 1\n__annotations__", `{"x":"Undefined"}`},
		{"import sys\nsys._getframe().f_lineno", "2"},
		{"x = 0\n" + strings.Repeat("x = x + 1\n", 600) + "x", "600"},
		{"1" + strings.Repeat(" + 1", 300), "301"},
	} {
		out := spinetest.MustRun(t, r, spine.Request{Source: c.src})
		if string(out.Value) != c.want {
			t.Errorf("%.60q: value %s, want %s", c.src, out.Value, c.want)
		}
	}
}

// TestLastExpressionWarningOrder: the last expression is compiled after the rest of the
// program ran, on both paths, so a warning it raises comes after the program's output.
func TestLastExpressionWarningOrder(t *testing.T) {
	r := shared(t)
	src := "import sys\nprint('first', file=sys.stderr)\nx = 1\nx is 1"
	out := spinetest.MustRun(t, r, spine.Request{Source: src})
	first := strings.Index(out.Stderr, "first")
	warning := strings.Index(out.Stderr, "SyntaxWarning")
	if first < 0 || warning < first {
		t.Fatalf("stderr %q: want the program's output before the warning", out.Stderr)
	}
}

func FuzzLastExpression(f *testing.F) {
	for _, src := range lastExprPrograms {
		if len(src) < 4096 {
			f.Add(src)
		}
	}
	for i, src := range deepPrograms() {
		if i%16 == 0 {
			f.Add(src)
		}
	}
	r := shared(f)
	f.Fuzz(func(t *testing.T, src string) {
		// A generated program may loop for ever; the time-out only ends it.
		req := spine.Request{Source: src, Timeout: 5 * time.Second}
		fast := lastExprRequest(r, req)
		req.Transformed = true
		slow := lastExprRequest(r, req)
		if strings.Contains(fast+slow, "not a Python error") {
			t.Skip("the run did not end in Python") // a limit, a time-out
		}
		req.Transformed = false
		if fast != slow && lastExprRequest(r, req) == fast {
			t.Errorf("%q:\nC path:\n%s\nPython path:\n%s", src, fast, slow)
		}
	})
}
