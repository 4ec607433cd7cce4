package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spine-run/spine/guest"
)

func TestVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compute suite on two Guests")
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"spine.wasm": guest.Wasm, guest.StdlibZipName: guest.StdlibZip} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var progress bytes.Buffer
	v, err := RunVariant(context.Background(), VariantConfig{Dir: dir, Runs: 1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Workloads) != len(workloads) || v.Runs != 1 || !strings.Contains(progress.String(), "run 1 of 1") {
		t.Fatalf("%d workloads, %d runs, progress %q", len(v.Workloads), v.Runs, progress.String())
	}
	if v.Base.WasmBytes != len(guest.Wasm) || v.Other.WasmBytes != len(guest.Wasm) || v.Base.NewMs <= 0 || v.Other.NewMs <= 0 {
		t.Fatalf("Guests %+v and %+v", v.Base, v.Other)
	}
	logSum := 0.0
	for _, w := range v.Workloads {
		if w.BaseMs <= 0 || w.OtherMs <= 0 || math.Abs(w.Ratio-w.OtherMs/w.BaseMs) > 1e-9 {
			t.Fatalf("%s: %+v", w.Name, w)
		}
		logSum += math.Log(w.Ratio)
	}
	if want := math.Exp(logSum / float64(len(workloads))); math.Abs(v.GeoMean-want) > 1e-9 {
		t.Fatalf("geometric mean %v, the ratios' is %v", v.GeoMean, want)
	}
	if _, ok := threadCPU(); ok && (v.GeoMeanCPU <= 0 || v.Workloads[0].CPURatio <= 0) {
		t.Fatalf("thread CPU time readable, but not reported: %+v", v)
	}
	var out bytes.Buffer
	v.Print(&out)
	for _, want := range []string{"geometric mean", "nbody", dir} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestVariantNoTicks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compute suite on two Guests")
	}
	v, err := RunVariant(context.Background(), VariantConfig{NoTicks: true, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.Variant, "without its tick checks") || v.GeoMean <= 0 {
		t.Fatalf("%+v", v)
	}
}

func TestVariantMissing(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	onlyWasm := filepath.Join(dir, "only-wasm")
	if err := os.Mkdir(onlyWasm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(onlyWasm, "spine.wasm"), guest.Wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.Mkdir(garbage, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"spine.wasm": []byte("\x00asm not a module"), guest.StdlibZipName: guest.StdlibZip} {
		if err := os.WriteFile(filepath.Join(garbage, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ dir, want string }{
		{"", "no folder"},
		{filepath.Join(dir, "absent"), "no such file"},
		{file, "is not a folder"},
		{dir, "has no spine.wasm"},
		{onlyWasm, "has no python311.zip"},
		{garbage, "cannot instrument"},
	} {
		_, err := LoadVariant(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadVariant(%q): %v, want %q", c.dir, err, c.want)
		}
		if c.dir == "" {
			continue
		}
		if _, err := RunVariant(context.Background(), VariantConfig{Dir: c.dir, Runs: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunVariant(%q): %v, want %q", c.dir, err, c.want)
		}
	}
	if _, err := RunVariant(context.Background(), VariantConfig{Dir: dir, NoTicks: true, Runs: 1}); err == nil {
		t.Error("RunVariant with a folder and no-ticks: no error")
	}
	if _, err := RunVariant(context.Background(), VariantConfig{Runs: 1}); err == nil {
		t.Error("RunVariant with neither: no error")
	}
}
