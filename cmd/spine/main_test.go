package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spine-run/spine"
)

// TestMain keeps the MCP servers' logs (serverLogDir) out of the user's
// state folder: the tests' spine, and its subprocesses, write them to a
// folder of their own. It fills the compilation cache first: a command
// that compiles the Guest says so on standard error, which tests that
// compare standard error whole would see.
func TestMain(m *testing.M) {
	state, err := os.MkdirTemp("", "spine-test-state")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_STATE_HOME", state)
	if r, err := spine.New(context.Background(), spine.Manifest{}, &spine.Options{PoolSize: -1}); err == nil {
		r.Close(context.Background())
	}
	code := m.Run()
	os.RemoveAll(state)
	os.Exit(code)
}

func TestDemo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"demo"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"lookup(key='book') -> 21",
		`lookup(key='unicorn') -> RuntimeError: no such key: "unicorn"`,
		"result: 63",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Fatalf("no arguments: exit %d, %q", code, stderr.String())
	}
	if code := run([]string{"frobnicate"}, &stdout, &stderr); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}
