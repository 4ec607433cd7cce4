package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The differential test of early reads: many generated programs run with early
// reads off and on must have exactly the same observable outcome — value,
// stdout, stderr, error (type, message, line, traceback), number of tool calls
// and the ordered list of non-early tool calls (design.md §6, "The guarantee").
//
// differentialPrograms is deterministic for a seed and independent of the way
// the programs are run, so other modes (prefix mode) can reuse it.

// differentialProgram is one generated program and how to run it.
type differentialProgram struct {
	Source string
	Inputs map[string]any
	Budget int // Options.MaxToolCalls to run it with; 0 means the default
}

// differentialPrograms returns n programs generated from seed. They use the
// tools of differentialManifest: get(k=...) and ns.fetch(k=..., n=...) allow
// early reads; put(k=..., v=...) and note(msg=...) do not.
func differentialPrograms(seed int64, n int) []differentialProgram {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	programs := make([]differentialProgram, n)
	for i := range programs {
		g := &programGen{r: rng}
		programs[i] = differentialProgram{Source: g.program(), Inputs: g.inputs()}
		if rng.IntN(4) == 0 {
			programs[i].Budget = 3 + rng.IntN(6)
		}
	}
	return programs
}

type programGen struct {
	r        *rand.Rand
	b        strings.Builder
	indent   int
	loopVars []string
	loops    int  // enclosing for loops (break and continue are allowed)
	helpers  bool // bump() and helper(k) are defined
	rebound  bool // get was rebound to a lambda
	hostile  bool // Loud, Odd, g_ and builtins are defined: the program plants hostile objects
	whiles   int
}

// hostilePrologue defines what a hostile program plants: Loud(name), a key
// whose hash is name's and whose __eq__ prints (in globals(), builtins or
// inputs, every lookup of name that meets it runs program code), and Odd,
// whose metaclass prints when the class is hashed or compared.
var hostilePrologue = []string{
	"import builtins",
	"class Loud:",
	"    def __init__(self, name):",
	"        self.h = hash(name)",
	"    def __hash__(self):",
	"        return self.h",
	"    def __eq__(self, other):",
	`        print("Loud.__eq__")`,
	"        return False",
	"class Meta(type):",
	"    def __hash__(cls):",
	`        print("Meta.__hash__")`,
	"        return 1",
	"    def __eq__(cls, other):",
	`        print("Meta.__eq__")`,
	"        return False",
	"class Odd(metaclass=Meta):",
	"    pass",
	"g_ = globals()",
}

// hostileNames are the names a Loud key collides with: the program's
// variables and tools, inputs' keys, built-in functions the evaluator may
// call, and names nothing defines.
var hostileNames = []string{"v0", "v1", "v3", "k", "get", "inputs", "len", "str", "sorted", "a", "b", "keys", "nothere", "__spine_prepare"}

var genStrings = []string{`"p"`, `"q"`, `"r"`, `"xy"`, `""`, `"p"`, `"q"`, `"bad"`}

func (g *programGen) inputs() map[string]any {
	keys := []any{"p", "q", "bad", "r", 3, 10}
	g.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	nums := make([]any, 1+g.r.IntN(5))
	for i := range nums {
		nums[i] = g.r.IntN(12)
	}
	return map[string]any{
		"a":    g.r.IntN(11),
		"b":    []string{"p", "bad", "xy", "q", "r"}[g.r.IntN(5)],
		"keys": keys[:1+g.r.IntN(len(keys))],
		"nums": nums,
		"m":    map[string]any{"x": g.r.IntN(9), "y": []string{"bad", "y", "zz", "q"}[g.r.IntN(4)]},
		"flag": g.r.IntN(2) == 0,
	}
}

func (g *programGen) line(format string, args ...any) {
	g.b.WriteString(strings.Repeat("    ", g.indent))
	fmt.Fprintf(&g.b, format, args...)
	g.b.WriteByte('\n')
}

func (g *programGen) pick(options ...string) string { return options[g.r.IntN(len(options))] }

func (g *programGen) variable() string { return "v" + strconv.Itoa(g.r.IntN(5)) }

func (g *programGen) program() string {
	if g.r.IntN(3) == 0 {
		g.helpers = true
		g.line("def bump():")
		g.line("    global v0")
		g.line("    v0 = %s", g.pick("v0 + 1", `"p"`, "inputs[\"a\"] * 2"))
		g.line("def helper(k):")
		g.line("    return get(k=k)")
	}
	if g.r.IntN(3) == 0 {
		g.hostile = true
		for _, l := range hostilePrologue {
			g.line("%s", l)
		}
		g.line(`inputs["o"] = Odd()`)
	}
	g.line(`v0 = inputs["a"]`)
	g.line(`v1 = inputs["b"]`)
	g.line("v2 = %s", g.pick("0", `"q"`, `get(k="p")`))
	g.line(`v3 = "p"`)
	g.line("v4 = []")
	g.block(0, 6+g.r.IntN(14))
	switch g.r.IntN(3) {
	case 0:
		g.line("result = [v0, v1, v2, v3, v4]")
	case 1:
		g.line("%s", g.pick("v0", "v3", "get(k=v3)", "[v1, v2]"))
	default:
		g.line("result = {\"v0\": v0, \"v4\": v4, \"last\": %s}", g.expr(1))
	}
	return g.b.String()
}

func (g *programGen) block(depth, n int) {
	for i := 0; i < n; i++ {
		g.stmt(depth)
	}
}

func (g *programGen) body(depth int) {
	g.indent++
	g.block(depth+1, 1+g.r.IntN(3))
	g.indent--
}

func (g *programGen) list() string {
	return g.pick(`inputs["keys"]`, `inputs["nums"]`, "range(3)", "["+g.expr(0)+", "+g.expr(0)+"]",
		"v4", `inputs["m"]`, `"pq"`, `inputs["keys"][1:]`)
}

func (g *programGen) stmt(depth int) {
	compound := depth < 3
	w := g.r.IntN(100)
	switch {
	case w < 16:
		g.line("%s = get(k=%s)", g.variable(), g.expr(1))
	case w < 22:
		g.line("%s = ns.fetch(k=%s, n=%s)", g.variable(), g.expr(1), g.pick("1", "2", "0", `inputs["a"]`, "1", "2", "-1", g.intExpr(0)))
	case w < 32:
		g.line("%s = %s", g.variable(), g.expr(2))
	case w < 38:
		if g.r.IntN(2) == 0 {
			g.line("put(k=%s, v=%s)", g.expr(1), g.expr(1))
		} else {
			g.line("note(msg=%s)", g.expr(1))
		}
	case w < 44:
		g.line("print(%s, %s)", g.expr(1), g.expr(1))
	case w < 51 && compound:
		g.line("if %s:", g.expr(1))
		g.body(depth)
		if g.r.IntN(2) == 0 {
			g.line("elif %s:", g.expr(1))
			g.body(depth)
		}
		if g.r.IntN(2) == 0 {
			g.line("else:")
			g.body(depth)
		}
	case w < 58 && compound:
		x := "x" + strconv.Itoa(depth)
		target := x
		list := g.list()
		if g.r.IntN(4) == 0 {
			target, list = x+", y"+strconv.Itoa(depth), g.pick(`inputs["m"].items()`, `enumerate(inputs["keys"])`, `zip(inputs["keys"], inputs["nums"])`)
		}
		g.line("for %s in %s:", target, list)
		g.loopVars = append(g.loopVars, x)
		g.loops++
		g.body(depth)
		g.loops--
		g.loopVars = g.loopVars[:len(g.loopVars)-1]
	case w < 62 && compound:
		c := "w" + strconv.Itoa(g.whiles)
		g.whiles++
		g.line("%s = 0", c)
		g.line("while %s < %d:", c, 1+g.r.IntN(3))
		g.indent++
		g.line("%s += 1", c)
		g.indent--
		g.body(depth)
	case w < 70:
		x := "c" + strconv.Itoa(depth)
		list := g.list() // evaluated outside the comprehension: before x is a name
		call := g.pick("get(k="+x+")", "ns.fetch(k="+x+", n=1)", "get(k=str("+x+") + \"!\")", "get(k=["+x+", 1][0])")
		cond := g.pick("", " if "+x+" != \"q\"", " if "+x)
		g.loopVars = append(g.loopVars, x)
		switch g.r.IntN(4) {
		case 0:
			g.line("%s = {%s: %s for %s in %s%s}", g.variable(), x, call, x, list, cond)
		case 1:
			g.line("%s = len([%s for %s in %s%s])", g.variable(), call, x, list, cond)
		default:
			g.line("%s = [%s for %s in %s%s]", g.variable(), call, x, list, cond)
		}
		g.loopVars = g.loopVars[:len(g.loopVars)-1]
	case w < 77 && compound:
		g.line("try:")
		g.body(depth)
		switch g.r.IntN(3) {
		case 0:
			g.line("except RuntimeError as e:")
			g.indent++
			g.line("note(msg=str(e))")
			g.indent--
		case 1:
			g.line("except Exception as e:")
			g.indent++
			g.line("print(type(e).__name__, e)")
			g.indent--
		default:
			g.line("except (TypeError, KeyError) as e:")
			g.indent++
			g.line("%s = str(e)", g.variable())
			g.indent--
			g.line("finally:")
			g.indent++
			g.line("print(\"finally\")")
			g.indent--
		}
	case w < 82:
		g.line("%s", g.pick(`inputs["a"] = `+g.expr(1), `inputs["keys"].append(`+g.expr(0)+`)`,
			"v4.append("+g.expr(1)+")", `inputs["m"]["x"] = `+g.expr(0), "v3 = v1", "v1 = v3"))
	case w < 86 && g.helpers:
		g.line("%s", g.pick("bump()", g.variable()+" = helper("+g.expr(1)+")"))
	case w < 88 && g.loops > 0:
		g.line("if %s:", g.expr(1))
		g.indent++
		g.line("%s", g.pick("break", "continue"))
		g.indent--
	case w < 89 && g.r.IntN(2) == 0:
		g.line("%s", g.pick(`raise ValueError("stop here")`, "v0 = v0 / 0", "exit()", `assert v0 != 3, "three"`))
	case w < 95 && g.hostile:
		name := hostileNames[g.r.IntN(len(hostileNames))]
		switch g.r.IntN(4) {
		case 0:
			g.line("g_[Loud(%q)] = %s", name, g.expr(0))
		case 1:
			g.line("builtins.__dict__[Loud(%q)] = %s", name, g.expr(0))
		case 2:
			g.line("inputs[Loud(%q)] = %s", name, g.expr(0))
		default:
			g.line("try:")
			g.indent++
			g.line("%s = get(k=%s)", g.variable(), g.pick(`inputs["o"]`, `[1, inputs["o"]]`, `{"x": inputs["o"]}`, `[inputs["a"], Odd]`))
			g.indent--
			g.line("except TypeError as e:")
			g.indent++
			g.line("print(e)")
			g.indent--
		}
	case w < 90 && !g.rebound:
		g.rebound = true
		g.line(`get = lambda k: ("local", k)`)
	default:
		g.line("%s = %s", g.variable(), g.variable())
	}
}

// expr returns an expression of any type; intExpr and strExpr mostly give
// ints and strings, so that most programs run a while before they fail.
func (g *programGen) expr(depth int) string {
	if depth <= 0 || g.r.IntN(3) == 0 {
		atoms := []string{
			g.variable(), g.variable(), `inputs["keys"][` + strconv.Itoa(g.r.IntN(3)-1) + `]`,
			`inputs["nums"]`, "True", "None", g.intExpr(0), g.strExpr(0),
		}
		if len(g.loopVars) > 0 {
			atoms = append(atoms, g.loopVars[len(g.loopVars)-1], g.loopVars[g.r.IntN(len(g.loopVars))])
		}
		return atoms[g.r.IntN(len(atoms))]
	}
	d := depth - 1
	switch g.r.IntN(12) {
	case 0, 1:
		return g.intExpr(depth)
	case 2, 3:
		return g.strExpr(depth)
	case 4:
		return "(" + g.expr(d) + " if " + g.expr(d) + " else " + g.expr(d) + ")"
	case 5:
		return "[" + g.expr(d) + ", " + g.expr(d) + "]"
	case 6:
		return `{"k": ` + g.expr(d) + "}"
	case 7:
		return "(" + g.expr(d) + ") == (" + g.expr(d) + ")"
	case 8:
		return "(not " + g.expr(d) + ")"
	case 9:
		return "get(k=" + g.expr(d) + ")"
	case 10:
		return "ns.fetch(k=" + g.expr(d) + ", n=" + g.pick("0", "3", `inputs["a"]`, g.intExpr(0)) + ")"
	default:
		return g.pick("put(k="+g.expr(d)+", v=1)", "("+g.expr(d)+")[0]", "len("+g.expr(d)+")")
	}
}

func (g *programGen) intExpr(depth int) string {
	if depth <= 0 || g.r.IntN(3) == 0 {
		return g.pick(strconv.Itoa(g.r.IntN(12)), `inputs["a"]`, `inputs["m"]["x"]`, `inputs.get("zz", 4)`, "v0")
	}
	d := depth - 1
	switch g.r.IntN(6) {
	case 0:
		return g.intExpr(d) + " + " + g.intExpr(d)
	case 1:
		return "(" + g.intExpr(d) + ") * 2"
	case 2:
		return "(" + g.intExpr(d) + ") % 3"
	case 3:
		return "len(" + g.strExpr(d) + ")"
	case 4:
		return "len(" + g.pick(`inputs["keys"]`, `inputs["nums"]`, "v4") + ")"
	default:
		return "(" + g.intExpr(d) + " if " + g.expr(d) + " else " + g.intExpr(d) + ")"
	}
}

func (g *programGen) strExpr(depth int) string {
	if depth <= 0 || g.r.IntN(3) == 0 {
		return g.pick(genStrings[g.r.IntN(len(genStrings))], `inputs["b"]`, "v3", `inputs["m"]["y"]`)
	}
	d := depth - 1
	switch g.r.IntN(4) {
	case 0:
		return g.strExpr(d) + " + " + g.strExpr(d)
	case 1:
		return "str(" + g.expr(d) + ")"
	case 2:
		return `f'{` + g.expr(0) + `}-{` + g.expr(0) + `!r}'` // atoms only: no f-string in an f-string
	default:
		return "get(k=" + g.strExpr(d) + ")"
	}
}

// differentialRecorder collects the non-early tool calls of one run, in order.
type differentialRecorder struct {
	mu       sync.Mutex
	calls    []string
	early    int // early-read tool calls started, prepared or not
	puts     int
	finished bool
}

type differentialKey struct{}

func recorderOf(ctx context.Context) *differentialRecorder {
	rec, _ := ctx.Value(differentialKey{}).(*differentialRecorder)
	if rec == nil {
		rec = &differentialRecorder{} // outside a differential run
	}
	return rec
}

func (rec *differentialRecorder) record(name string, args json.RawMessage) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.calls = append(rec.calls, name+" "+string(args))
	if name == "put" {
		rec.puts++
	}
	return rec.puts
}

// differentialManifest: the early-read tools are deterministic functions of
// their arguments (the early-read promise); the others record their calls.
func differentialManifest() spine.Manifest {
	get := func(ctx context.Context, args json.RawMessage) (any, error) {
		rec := recorderOf(ctx)
		rec.mu.Lock()
		rec.early++
		rec.mu.Unlock()
		time.Sleep(time.Duration(len(args)%4) * 50 * time.Microsecond)
		var a struct{ K any }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		switch k := a.K.(type) {
		case float64:
			if int(k)%11 == 5 {
				return nil, fmt.Errorf("get: unlucky %v", k)
			}
			return k*3 + 1, nil
		case string:
			if k == "bad" {
				return nil, errors.New("get: bad key")
			}
			return k + "!", nil
		case nil:
			return "none", nil
		case []any:
			return len(k), nil
		case bool:
			return "yes", nil
		case map[string]any:
			return map[string]any{"size": len(k)}, nil
		}
		return nil, fmt.Errorf("get: cannot look up %s", args)
	}
	fetch := func(ctx context.Context, args json.RawMessage) (any, error) {
		rec := recorderOf(ctx)
		rec.mu.Lock()
		rec.early++
		rec.mu.Unlock()
		var a struct {
			K any
			N any
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		if n, ok := a.N.(float64); !ok || n < 0 {
			return nil, fmt.Errorf("fetch: bad n %v", a.N)
		}
		return map[string]any{"k": a.K, "n": a.N}, nil
	}
	return spine.Manifest{
		"get":      {Call: get, AllowEarlyRead: true},
		"ns.fetch": {Call: fetch, AllowEarlyRead: true},
		"put": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			return recorderOf(ctx).record("put", args), nil
		}},
		"note": {Call: func(ctx context.Context, args json.RawMessage) (any, error) {
			recorderOf(ctx).record("note", args)
			return nil, nil
		}},
	}
}

// differentialOutcome is everything a run shows its caller.
type differentialOutcome struct {
	Value, Stdout, Stderr string
	Error                 string // Go error (a *PythonError in full), "" when none
	ToolCalls             int
	Calls                 []string // non-early tool calls, in order
	earlyStarts           int
}

func (o differentialOutcome) String() string {
	return fmt.Sprintf("value %s\nstdout %q\nstderr %q\nerror %s\ntool calls %d\nnon-early calls %q",
		o.Value, o.Stdout, o.Stderr, o.Error, o.ToolCalls, o.Calls)
}

func differentialRun(r *spine.Runner, p differentialProgram, early bool) differentialOutcome {
	return differentialRunRequest(r, spine.Request{Source: p.Source, Inputs: p.Inputs, EarlyReads: early})
}

// differentialRunRequest runs req (a program of differentialPrograms, sent any
// way) and collects its outcome.
func differentialRunRequest(r *spine.Runner, req spine.Request) differentialOutcome {
	rec := &differentialRecorder{}
	ctx := context.WithValue(context.Background(), differentialKey{}, rec)
	out, err := r.Run(ctx, req)
	var o differentialOutcome
	if out != nil {
		o.Value, o.Stdout, o.Stderr, o.ToolCalls = string(out.Value), out.Stdout, out.Stderr, out.ToolCalls
	}
	var pe *spine.PythonError
	if errors.As(err, &pe) {
		o.Error = fmt.Sprintf("%s: %s (line %d)\n%s", pe.Type, pe.Message, pe.Line, pe.Traceback)
	} else if err != nil {
		o.Error = "not a Python error: " + err.Error()
	}
	rec.mu.Lock()
	o.Calls, o.earlyStarts = slices.Clone(rec.calls), rec.early
	rec.mu.Unlock()
	return o
}

func differentialEqual(a, b differentialOutcome) bool {
	return a.Value == b.Value && a.Stdout == b.Stdout && a.Stderr == b.Stderr && a.Error == b.Error &&
		a.ToolCalls == b.ToolCalls && slices.Equal(a.Calls, b.Calls)
}

func TestDifferentialEarlyReads(t *testing.T) {
	n := 200
	if !testing.Short() {
		n = 600
	}
	programs := differentialPrograms(20260101, n)
	runners := map[int]*spine.Runner{0: spinetest.NewRunner(t, differentialManifest(), nil)}
	for _, p := range programs {
		if _, ok := runners[p.Budget]; !ok {
			runners[p.Budget] = spinetest.NewRunner(t, differentialManifest(), &spine.Options{MaxToolCalls: p.Budget})
		}
	}
	var (
		mu                 sync.Mutex
		failures           int
		errorsSeen, values int
		earlyOff, earlyOn  int
	)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := programs[i]
				off := differentialRun(runners[p.Budget], p, false)
				on := differentialRun(runners[p.Budget], p, true)
				mu.Lock()
				earlyOff += off.earlyStarts
				earlyOn += on.earlyStarts
				if off.Error != "" {
					errorsSeen++
				} else {
					values++
				}
				if strings.HasPrefix(off.Error, "not a Python error") || !differentialEqual(off, on) {
					failures++
					if failures <= 5 {
						inputs, _ := json.Marshal(p.Inputs)
						t.Errorf("program %d (budget %d, inputs %s):\n%s\n--- early reads off:\n%s\n--- early reads on:\n%s",
							i, p.Budget, inputs, p.Source, off, on)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range programs {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d programs: %d ended with a value, %d with an error; early-read tool runs: %d off, %d on",
		len(programs), values, errorsSeen, earlyOff, earlyOn)
	if failures > 0 {
		t.Fatalf("%d of %d programs differ", failures, len(programs))
	}
	// The corpus must exercise both ways a program ends.
	if values < len(programs)/10 || errorsSeen < len(programs)/10 {
		t.Fatalf("the generator is lopsided: %d values, %d errors", values, errorsSeen)
	}
}

// TestDifferentialTooDeepForThePass: programs nested about as deep as the
// compiler takes (591 nested not, where the tree with the pass's prepares is
// too deep to compile, or the program itself is) have the same outcome with
// early reads off, on, and streamed (prefix mode): the pass gives up silently
// and the program runs as written. The parser's warning (the SyntaxWarning of
// "1if") is printed once, as with early reads off.
func TestDifferentialTooDeepForThePass(t *testing.T) {
	r := spinetest.NewRunner(t, differentialManifest(), nil)
	warn := "y = 1if inputs['flag'] else 2\n"
	shapes := []string{
		warn + "a = get(k='p')\nb = get(k=str(%sTrue))\nresult = [a, b, y]",
		warn + "a = get(k='p')\nb = get(k=%sa)\nresult = [a, b, y]",
		warn + "k = %sTrue\na = get(k=str(k))\nresult = [a, y]",
		warn + "a = get(k='p')\nif %sa:\n    b = get(k='q')\nresult = [a, y]",
		warn + "for k in ['p', 'q']:\n    a = get(k=k)\n    b = %sa\nresult = [b, y]",
		warn + "a = get(k='p')\nb = %sget(k='q')\nresult = [a, b, y]",
	}
	deepest := 0 // the deepest nesting that ran to its end with early reads off
	for i, shape := range shapes {
		for _, n := range []int{585, 591, 597} {
			src := fmt.Sprintf(shape, strings.Repeat("not ", n))
			in := map[string]any{"flag": true}
			off := differentialRunRequest(r, spine.Request{Source: src, Inputs: in})
			on := differentialRunRequest(r, spine.Request{Source: src, Inputs: in, EarlyReads: true})
			streamed := differentialRunRequest(r, spine.Request{Inputs: in,
				Stream: &chunkReader{data: []byte(src), rng: rand.New(rand.NewPCG(uint64(i), uint64(n))), max: 64}})
			if !differentialEqual(off, on) || !differentialEqual(off, streamed) {
				t.Errorf("shape %d, %d nested not:\n--- early reads off:\n%s\n--- on:\n%s\n--- streamed:\n%s", i, n, off, on, streamed)
			}
			if c := strings.Count(off.Stderr, "SyntaxWarning: invalid decimal literal"); c != 1 {
				t.Errorf("shape %d, %d nested not: the warning is printed %d times: %q", i, n, c, off.Stderr)
			}
			if off.Error == "" && n > deepest {
				deepest = n
			}
		}
	}
	if deepest < 591 {
		t.Fatalf("no program 591 deep ran to its end: the case is not tested")
	}
}

// TestDifferentialProgramsDeterministic: the same seed gives the same programs.
func TestDifferentialProgramsDeterministic(t *testing.T) {
	a, b := differentialPrograms(7, 20), differentialPrograms(7, 20)
	for i := range a {
		ja, _ := json.Marshal(a[i])
		jb, _ := json.Marshal(b[i])
		if string(ja) != string(jb) {
			t.Fatalf("program %d differs between two generations", i)
		}
	}
}
