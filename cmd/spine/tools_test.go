package main

import (
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

func TestToolsDemo(t *testing.T) {
	// No demo tools unless asked for.
	spineCLI(t, "", "tools").check(t, 0, spine.Stubs(spine.Manifest{}))
	r := spineCLI(t, "", "tools", "--demo-tools")
	r.check(t, 0, spine.Stubs(demoTools()))
	for _, s := range []string{
		"def lookup(key: str) -> Any:",
		"class prices:\n    @staticmethod\n    def list(limit: int | None = None) -> Any:",
	} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("spine tools lacks %q:\n%s", s, r.stdout)
		}
	}
}

func TestToolsMCP(t *testing.T) {
	config := testConfig(t)
	r := spineCLI(t, "", "tools", "--config", config)
	r.check(t, 0, "*")
	if strings.Contains(r.stdout, "lookup") || strings.Contains(r.stdout, "class prices") {
		t.Errorf("spine tools without --demo-tools lists the demo tools:\n%s", r.stdout)
	}
	r = spineCLI(t, "", "tools", "--config", config, "--demo-tools")
	r.check(t, 0, "*")
	for _, s := range []string{
		"def lookup(key: str) -> Any:",
		"class AddResult(TypedDict):\n    sum: int\n", // the server's output schema
		"class calc:\n    @staticmethod\n    def add(a: int, b: int) -> AddResult:\n        \"\"\"Add two integers.\n\n        Args:\n            a: the first addend\n            b: the second addend\n        \"\"\"\n",
		"    def echo(text: str, times: int = 1) -> Any:\n        \"\"\"Repeat text.\n\n        Args:\n            text: what to say\n        \"\"\"",
		"class web:\n",
	} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("spine tools lacks %q:\n%s", s, r.stdout)
		}
	}
}

func TestToolsUsage(t *testing.T) {
	spineCLI(t, "", "tools", "--nope").check(t, 2, "", "flag provided but not defined")
	spineCLI(t, "", "tools", "extra").check(t, 2, "", "unexpected argument")
	spineCLI(t, "", "tools", "--config", "/no/such.json").check(t, 2, "", "no such file")
	r := spineCLI(t, "", "tools", "-h")
	r.check(t, 0, "*")
	if !strings.Contains(r.stdout, "usage: spine tools") || !strings.Contains(r.stdout, "--demo-tools") {
		t.Errorf("help: %s", r.stdout)
	}
}
