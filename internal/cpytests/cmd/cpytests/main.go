// Command cpytests runs modules of CPython 3.11.2's regression tests in the Guest and
// natively, and prints both sides' figures and every difference (make cpython-tests;
// docs/fidelity.md).
//
//	go run ./internal/cpytests/cmd/cpytests -source build/guest/Python-3.11.2
//
// It exits 0 when every module was run on both sides, whatever the outcomes; 1 when the
// setup failed (no CPython source, no native 3.11.2, no Guest).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/cpytests"
)

func main() {
	source := flag.String("source", "", "CPython 3.11.2's source folder (guest/build.sh --source-only prints it)")
	work := flag.String("work", "build/cpython-tests", "folder for the archive with the test package and the native runs")
	out := flag.String("out", "", "the JSON report (default WORK/results.json)")
	guestDir := flag.String("guest", "guest", "the repository's guest folder (its artifact/python311.zip and mkstdlib.py)")
	python := flag.String("python", cpytests.Python, "the native CPython 3.11.2")
	modules := flag.String("modules", strings.Join(cpytests.Modules, ","), "comma-separated modules of the test package")
	resources := flag.String("resources", "", "comma-separated test.support resources to enable (regrtest's -u); none by default, as regrtest")
	timeout := flag.Duration("timeout", 10*time.Minute, "time limit of one module on one side")
	flag.Parse()
	if *out == "" {
		*out = filepath.Join(*work, "results.json")
	}
	if err := run(*source, *work, *out, *guestDir, *python, split(*modules), split(*resources), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "cpytests:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Results is the JSON report.
type Results struct {
	Python    string             `json:"python"`
	Source    string             `json:"source"`
	Resources []string           `json:"resources"`
	Seconds   float64            `json:"seconds"`
	Modules   []*cpytests.Module `json:"modules"`
}

func run(source, work, out, guestDir, python string, modules, resources []string, timeout time.Duration) error {
	start := time.Now()
	ctx := context.Background()
	if source == "" {
		return fmt.Errorf("-source is required (guest/build.sh --source-only prints the folder)")
	}
	lib := filepath.Join(source, "Lib")
	if _, err := os.Stat(filepath.Join(lib, "test", "__init__.py")); err != nil {
		return fmt.Errorf("no test package in %s: %v", lib, err)
	}
	if len(modules) == 0 {
		return fmt.Errorf("no modules to run")
	}
	if err := cpytests.CheckPython(python); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	work, err := filepath.Abs(work)
	if err != nil {
		return err
	}

	// The Guest side: its archive plus the packages of the modules asked for.
	var roots []string
	for _, m := range modules {
		roots = append(roots, strings.Split(m, ".")[0])
	}
	zipPath := filepath.Join(work, "python311-tests.zip")
	fmt.Fprintf(os.Stderr, "building %s\n", zipPath)
	if err := cpytests.BuildZip(ctx, python, guestDir, lib, zipPath, roots); err != nil {
		return err
	}
	zip, err := os.ReadFile(zipPath)
	if err != nil {
		return err
	}
	r, err := spine.New(ctx, nil, cpytests.GuestOptions(zip, timeout))
	if err != nil {
		return fmt.Errorf("the Guest with the test package: %w", err)
	}
	defer r.Close(ctx)

	// The native side: the test package alone in a folder, so the rest of the standard
	// library is the interpreter's own.
	native := filepath.Join(work, "native")
	if err := os.MkdirAll(native, 0o755); err != nil {
		return err
	}
	testLink := filepath.Join(native, "test")
	absTest, err := filepath.Abs(filepath.Join(lib, "test"))
	if err != nil {
		return err
	}
	os.Remove(testLink)
	if err := os.Symlink(absTest, testLink); err != nil {
		return err
	}

	// The two sides run at once, each one module at a time: on two cores that keeps
	// both busy without either side's modules competing among themselves.
	natives := make([]chan *cpytests.Report, len(modules))
	for i := range natives {
		natives[i] = make(chan *cpytests.Report, 1)
	}
	go func() {
		for i, m := range modules {
			natives[i] <- cpytests.RunNative(ctx, python, native, work, m, resources, timeout)
		}
	}()
	var results []*cpytests.Module
	for i, m := range modules {
		g := cpytests.RunGuest(ctx, r, m, resources)
		n := <-natives[i]
		res := cpytests.Compare(g, n)
		results = append(results, res)
		c := res.GuestCounts
		fmt.Fprintf(os.Stderr, "%-32s Guest %-14s %4d run %4d passed %3d failed %3d errors %4d skipped  %6.1f s | native %6.1f s | %d differences\n",
			m, g.Status, c.Run, c.Passed, c.Failed, c.Errors, c.Skipped, g.Seconds, n.Seconds, len(res.Differences))
	}

	report := Results{Python: python, Source: source, Resources: resources, Modules: results,
		Seconds: time.Since(start).Seconds()}
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return err
	}
	fmt.Println()
	cpytests.Details(os.Stdout, results)
	fmt.Println()
	cpytests.Table(os.Stdout, results)
	fmt.Printf("\n%d modules in %.0f s; the report: %s\n", len(results), report.Seconds, out)
	return nil
}
