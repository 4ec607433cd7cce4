package spine

import "sync"

var (
	testExitMu sync.Mutex
	testExit   []func()
)

// AtTestExit registers f to run when the package's tests end (TestMain):
// the black-box suites (package spine_test) close their shared Runner with it.
func AtTestExit(f func()) {
	testExitMu.Lock()
	defer testExitMu.Unlock()
	testExit = append(testExit, f)
}
