package spine

import (
	"os"
	"sync"
	"testing"

	"github.com/spine-run/spine/internal/engine"
)

// What the black-box suites (package spine_test) reach that the API does not
// offer.

var (
	testExitMu sync.Mutex
	testExit   []func()
)

// TestMain runs the tests, then what AtTestExit registered.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, f := range testExit {
		f()
	}
	os.Exit(code)
}

// AtTestExit registers f to run when the package's tests end (TestMain):
// the black-box suites close their shared Runners with it.
func AtTestExit(f func()) {
	testExitMu.Lock()
	defer testExitMu.Unlock()
	testExit = append(testExit, f)
}

// EngineOf is r's engine, for BenchmarkInstance to time a Guest's start.
func EngineOf(r *Runner) *engine.Engine { return r.engine }

// NoWake makes r never wake the Guest for chained reads, for the tests and
// the benchmark that compare runs with the wake and without it.
func NoWake(r *Runner) { r.noWake = true }

// UserPackages is userPackages (packages_pack_test.go), for the black-box
// tests of packages.
var UserPackages = userPackages
