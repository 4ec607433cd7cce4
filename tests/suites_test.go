package tests

import (
	"os"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The suites share one Runner of spinetest.SuiteManifest, made on first use
// and closed when the tests end (TestMain).

var (
	exitMu sync.Mutex
	atExit []func()
)

// TestMain runs the tests, then closes what the suites registered.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}

// shared returns the suites' shared Runner.
var shared = spinetest.SharedRunner(spinetest.SuiteManifest, func(f func()) {
	exitMu.Lock()
	defer exitMu.Unlock()
	atExit = append(atExit, f)
})

// valueOf is out's value as text, for a failure's message.
func valueOf(out *spine.Output) string {
	if out == nil {
		return "(no output)"
	}
	return string(out.Value)
}
