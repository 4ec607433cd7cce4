package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
)

// usages are every command's usage text and flags (nil: none).
var usages = map[string]struct {
	usage string
	flags func(*flag.FlagSet)
}{
	"demo":            {demoUsage, new(cacheFlags).flags},
	"run":             {runUsage, new(runOptions).flags},
	"replay":          {replayUsage, new(replayOptions).flags},
	"tools":           {toolsUsage, new(toolsOptions).flags},
	"bench":           {benchUsage, new(benchOptions).flags},
	"bench first-run": {firstRunUsage, new(firstRunOptions).flags},
	"serve":           {serveUsage, new(serveOptions).flags},
	"mcp":             {mcpUsage, new(mcpOptions).flags},
	"soak":            {soakUsage, new(soakOptions).flags},
	"version":         {versionUsage, nil},
	"warm":            {warmUsage, new(warmOptions).flags},
}

// TestCommandFlags: every command prints its usage to standard output for -h
// and --help (exit 0), and what is wrong and its usage to standard error for
// a flag it does not have (exit 2).
func TestCommandFlags(t *testing.T) {
	for name := range commands {
		if _, ok := usages[name]; !ok {
			t.Errorf("command %s is not in usages", name)
		}
	}
	for name, c := range usages {
		t.Run(name, func(t *testing.T) {
			args := strings.Fields(name)
			for _, help := range []string{"-h", "--help"} {
				var stdout, stderr bytes.Buffer
				code := run(append(args, help), &stdout, &stderr)
				if code != exitOK || stdout.String() != c.usage || stderr.Len() != 0 {
					t.Errorf("%s: exit %d, stdout %q, stderr %q", help, code, stdout.String(), stderr.String())
				}
			}
			var stdout, stderr bytes.Buffer
			code := run(append(args, "--no-such-flag"), &stdout, &stderr)
			want := "spine " + name + ": flag provided but not defined: -no-such-flag\n\n" + c.usage
			if code != exitUsage || stdout.Len() != 0 || stderr.String() != want {
				t.Errorf("a bad flag: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
		})
	}
}

// TestUsageTexts: every usage names its command, lists every flag and only
// flags, gives each default that is not zero as the flag has it, and says
// which exit codes there are.
func TestUsageTexts(t *testing.T) {
	t.Setenv("SPINE_CONFIG", "") // --config's default
	defaultRE := regexp.MustCompile(`\(default ([^:)][^)]*)\)`)
	for name, c := range usages {
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(c.usage, "usage: spine "+name) || !strings.Contains(c.usage, "\nexit codes: 0 ") {
				t.Errorf("usage:\n%s", c.usage)
			}
			listed := map[string]string{} // flag name → its line
			for _, line := range strings.Split(c.usage, "\n") {
				if rest, ok := strings.CutPrefix(line, "  --"); ok {
					listed[strings.Fields(rest)[0]] = line
				}
			}
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			if c.flags != nil {
				c.flags(fs)
			}
			fs.VisitAll(func(f *flag.Flag) {
				line, ok := listed[f.Name]
				delete(listed, f.Name)
				switch {
				case !ok:
					t.Errorf("--%s is not listed", f.Name)
				case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "0s":
				default:
					m := defaultRE.FindStringSubmatch(line)
					if m == nil {
						t.Errorf("--%s: no (default %s) in %q", f.Name, f.DefValue, line)
					} else if err := f.Value.Set(m[1]); err != nil || f.Value.String() != f.DefValue {
						t.Errorf("--%s: usage says default %s, the flag has %s (%v)", f.Name, m[1], f.DefValue, err)
					}
				}
			})
			for name := range listed {
				t.Errorf("--%s is listed but is no flag", name)
			}
		})
	}
}

// TestExitCodes: the failures of each command that are not Python's, a
// time-out or the command line's are exit code 4 (run's are in run_test.go,
// bench's in bench_test.go).
func TestExitCodes(t *testing.T) {
	broken := writeFile(t, "broken.json", `{"servers": {"gone": {"command": ["/no/such/server"]}}}`)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tools", "--config", broken}, exitFailure, "/no/such/server"},
		{[]string{"serve", "--listen", taken.Addr().String()}, exitFailure, "address already in use"},
		{[]string{"mcp", "--http", taken.Addr().String()}, exitFailure, "address already in use"},
		{[]string{"serve", "--listen", "0.0.0.0:0"}, exitUsage, "not a loopback address"},
		{[]string{"serve", "--mcp-allow", "mcp.example.com,127.1"}, exitUsage, `--mcp-allow: entry "127.1"`},
		{[]string{"soak", "--runs", "0"}, exitUsage, "must be positive"},
		{[]string{"bench", "first-run"}, exitUsage, "--cache is required"},
		{[]string{"demo", "extra"}, exitUsage, `unexpected argument "extra"`},
	} {
		t.Setenv("SPINE_CONFIG", "")
		t.Setenv("SPINE_TOKEN", "")
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, want %d with %q; stderr %q", c.args, code, c.code, c.want, stderr.String())
		}
	}

	// The demo's failures outside Python: here, the context ends first.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	if code := demo(ctx, nil, &stdout, &stderr); code != exitFailure {
		t.Errorf("demo, context cancelled: exit %d, stderr %q", code, stderr.String())
	}
}

// TestDocsFlagTables: the flag table of spine run in docs/cli.md, of spine
// serve in docs/http.md and of spine mcp in docs/mcp.md name every flag its
// -h lists, and no other, so that the pages cannot drift from the commands.
func TestDocsFlagTables(t *testing.T) {
	nameRE := regexp.MustCompile("`--([a-z0-9-]+)")
	for _, c := range []struct{ command, page string }{
		{"run", "../../docs/cli.md"},
		{"serve", "../../docs/http.md"},
		{"mcp", "../../docs/mcp.md"},
	} {
		t.Run(c.command, func(t *testing.T) {
			page, err := os.ReadFile(c.page)
			if err != nil {
				t.Fatal(err)
			}
			documented := map[string]bool{}
			for _, line := range strings.Split(string(page), "\n") {
				if !strings.HasPrefix(line, "| `--") {
					continue
				}
				first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
				for _, m := range nameRE.FindAllStringSubmatch(first, -1) {
					documented[m[1]] = true
				}
			}
			for _, line := range strings.Split(usages[c.command].usage, "\n") {
				if rest, ok := strings.CutPrefix(line, "  --"); ok {
					name := strings.Fields(rest)[0]
					if !documented[name] {
						t.Errorf("--%s is in spine %s -h but not in %s's flag table", name, c.command, c.page)
					}
					delete(documented, name)
				}
			}
			for name := range documented {
				t.Errorf("%s's flag table has --%s, which spine %s -h does not list", c.page, name, c.command)
			}
		})
	}
}
