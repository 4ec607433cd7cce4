package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// What the wasmtime module (its own, with cgo) measures against: the
// programs of the compute and numpy suites and the bare host, which it
// cannot reach unexported.

// Program is one program of the compute suite, ready to run: its source
// ends with computeWrap, so its value is [ns of work(setup()), its result].
type Program struct{ Name, Source string }

// ComputePrograms are the compute suite's programs.
func ComputePrograms() []Program {
	programs := make([]Program, len(workloads))
	for i, w := range workloads {
		programs[i] = Program{Name: w.name, Source: w.source + computeWrap}
	}
	return programs
}

// NumpyPrograms are the numpy suite's programs, for the data Guest: their
// value is [ns of work(setup()), a few floats] (NumpyValue).
func NumpyPrograms() []Program {
	programs := make([]Program, len(numpyWorkloads))
	for i, w := range numpyWorkloads {
		programs[i] = Program{Name: w.name, Source: w.source + computeWrap}
	}
	return programs
}

// NumpyValue reads a numpy program's value: ns of work(setup()), and the
// floats it computed.
func NumpyValue(v json.RawMessage) (ns int64, check []float64, ok bool) { return timedCheck(v) }

// NativeNumpy runs a numpy program in python (a process, with numpy and
// pandas) and returns its value's parts and native numpy's and pandas'
// versions.
func NativeNumpy(ctx context.Context, python, source string) (ns int64, check []float64, version string, err error) {
	return nativeNumpy(ctx, python, source)
}

// SameFloats reports whether two numpy programs' floats agree to nine
// significant digits, as the numpy suite requires of the Guest and native.
func SameFloats(a, b []float64) bool { return sameFloats(a, b) }

// NewBareRun starts the bare host (the Guest on wazero, one instance reused
// without reset) and returns one empty run of it and what closes it.
func NewBareRun(ctx context.Context) (run func(context.Context) error, release func(context.Context), err error) {
	h, err := newBareHost(ctx)
	if err != nil {
		return nil, nil, err
	}
	return h.run, h.close, nil
}

// NativeCompute runs a compute program in python (a process) and returns its
// value's time of work(setup()), in ns, and its result.
func NativeCompute(ctx context.Context, python, source string) (ns int64, result json.RawMessage, err error) {
	cmd := exec.CommandContext(ctx, python, "-c", computeNativeScript)
	cmd.Stdin = strings.NewReader(source)
	text, err := cmd.Output()
	if err != nil {
		return 0, nil, err
	}
	var native struct {
		Result [2]json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(text, &native); err != nil {
		return 0, nil, fmt.Errorf("printed %q: %v", text, err)
	}
	if err := json.Unmarshal(native.Result[0], &ns); err != nil {
		return 0, nil, fmt.Errorf("time %s: %v", native.Result[0], err)
	}
	return ns, native.Result[1], nil
}

// JSONEqual reports whether a and b are the same JSON value.
func JSONEqual(a, b json.RawMessage) bool { return jsonEqual(a, b) }
