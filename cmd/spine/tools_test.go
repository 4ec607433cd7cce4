package main

import (
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

func TestToolsDemo(t *testing.T) {
	r := spineCLI(t, "", "tools")
	r.check(t, 0, spine.Stubs(demoTools()))
	for _, s := range []string{
		"def lookup(*, key: str) -> Any:",
		"class prices:\n    @staticmethod\n    def list(*, limit: int | None = None) -> Any:",
	} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("spine tools lacks %q:\n%s", s, r.stdout)
		}
	}
}

func TestToolsMCP(t *testing.T) {
	r := spineCLI(t, "", "tools", "--config", testConfig(t))
	r.check(t, 0, "*")
	for _, s := range []string{
		"def lookup(*, key: str) -> Any:",
		"class calc:\n    @staticmethod\n    def add(*, a: int, b: int) -> Any:\n        \"\"\"Add two integers.\n\n        Args:\n            a: the first addend\n            b: the second addend\n        \"\"\"\n",
		"    def echo_text(*, text: str) -> Any:\n        \"\"\"Say text back.\"\"\"",
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
	if !strings.Contains(r.stdout, "usage: spine tools") {
		t.Errorf("help: %s", r.stdout)
	}
}
