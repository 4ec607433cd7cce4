package spine_test

import (
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The black-box tests (package spine_test) test the Runner through its API
// alone, with spinetest's tools and helpers. They share one Runner of
// spinetest.SuiteManifest, made on first use and closed when the tests end;
// the Guest's behaviour suites, which share one too, are package tests'.

// suiteManifest is spinetest.SuiteManifest: the test tools and the bridge's
// edge cases (echo, fail, nothing, unencodable, explode, huge, wait,
// market.get_price).
func suiteManifest() spine.Manifest { return spinetest.SuiteManifest() }

// sharedRunner returns a function that gives the Runner of manifest with
// the default options, made on its first call and closed when the tests end
// (spinetest.SharedRunner, closed by export_test.go's TestMain).
func sharedRunner(manifest func() spine.Manifest) func(testing.TB) *spine.Runner {
	return spinetest.SharedRunner(manifest, spine.AtTestExit)
}

// shared returns the tests' shared Runner, of suiteManifest.
var shared = sharedRunner(suiteManifest)

// valueOf is out's value as text, for a failure's message.
func valueOf(out *spine.Output) string {
	if out == nil {
		return "(no output)"
	}
	return string(out.Value)
}
