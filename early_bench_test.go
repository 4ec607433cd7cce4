package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// The early-read benchmark: a tool that takes 20 ms (and honours
// ctx), programs with independent, looped and dependent reads run with early
// reads off and on, and prefix mode on a program streamed at about 50 tokens
// per second. Run it with
//
//	go test -run '^$' -bench Early -benchtime 10x .
//
// Every iteration runs both ways (alternating which goes first); the metrics
// are the medians over the iterations: p50-off-ms, p50-on-ms, their ratio
// (off/on) and their difference (on-off-ms). ns/op means nothing here and is
// reported as 0.

// earlyReadDelay is how long the benchmark's read tool takes.
const earlyReadDelay = 20 * time.Millisecond

// earlyReader is the benchmark's tool. It records when each call started.
type earlyReader struct {
	mu     sync.Mutex
	starts []time.Time
	delay  time.Duration // how long a read takes; 0 means earlyReadDelay
}

// call answers read(key=k): len(k) for a string, k+1 for a number, after
// earlyReadDelay, or ctx's error if the run ends first.
func (e *earlyReader) call(ctx context.Context, args json.RawMessage) (any, error) {
	e.mu.Lock()
	e.starts = append(e.starts, time.Now())
	e.mu.Unlock()
	var a struct {
		Key any `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	delay := e.delay
	if delay == 0 {
		delay = earlyReadDelay
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	switch k := a.Key.(type) {
	case string:
		return len(k), nil
	case float64:
		return k + 1, nil
	}
	return nil, fmt.Errorf("read: key %v is neither a string nor a number", a.Key)
}

// startsSince counts the calls that started at or after t, and of those the
// ones that started before end.
func (e *earlyReader) startsSince(t, end time.Time) (all, before int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.starts {
		if !s.Before(t) {
			all++
			if s.Before(end) {
				before++
			}
		}
	}
	return all, before
}

func earlyBenchRunner(b *testing.B) (*spine.Runner, *earlyReader) {
	reader := &earlyReader{}
	r := spinetest.NewRunner(b, spine.Manifest{"read": {Call: reader.call, AllowEarlyRead: true}}, nil)
	return r, reader
}

func earlyMedian(samples []time.Duration) time.Duration {
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func earlyMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// earlyTimedRun runs req and checks its value.
func earlyTimedRun(b *testing.B, r *spine.Runner, req spine.Request, want string) time.Duration {
	b.Helper()
	start := time.Now()
	out, err := r.Run(context.Background(), req)
	elapsed := time.Since(start)
	if err != nil {
		var pe *spine.PythonError
		if errors.As(err, &pe) {
			b.Fatalf("%v\n%s", err, pe.Traceback)
		}
		b.Fatal(err)
	}
	if string(out.Value) != want {
		b.Fatalf("result %s, want %s", out.Value, want)
	}
	return elapsed
}

func BenchmarkEarlyReads(b *testing.B) {
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i) // len 3 each
	}
	var eight strings.Builder
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&eight, "v%d = read(key=\"key%d\")\n", i, i) // len 4 each
	}
	eight.WriteString("result = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7\n")
	scenarios := []struct {
		name   string
		source string
		inputs any
		want   string
	}{
		{"a-one", "result = read(key=\"alpha\")\n", nil, "5"},
		{"b-two", "x = read(key=\"alpha\")\ny = read(key=\"beta\")\nresult = x + y\n", nil, "9"},
		{"c-eight", eight.String(), nil, "32"},
		{"d-loop16", "total = 0\nfor k in inputs[\"keys\"]:\n    total += read(key=k)\nresult = total\n", map[string]any{"keys": keys}, "48"},
		{"e-chain3", "a = read(key=\"x\")\nb = read(key=a)\nc = read(key=b)\nresult = c\n", nil, "3"},
	}
	r, _ := earlyBenchRunner(b)
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			off := spine.Request{Source: sc.source, Inputs: sc.inputs}
			on := off
			on.EarlyReads = true
			earlyTimedRun(b, r, off, sc.want) // warm-up
			earlyTimedRun(b, r, on, sc.want)
			var offs, ons []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					offs = append(offs, earlyTimedRun(b, r, off, sc.want))
					ons = append(ons, earlyTimedRun(b, r, on, sc.want))
				} else {
					ons = append(ons, earlyTimedRun(b, r, on, sc.want))
					offs = append(offs, earlyTimedRun(b, r, off, sc.want))
				}
			}
			b.StopTimer()
			mOff, mOn := earlyMedian(offs), earlyMedian(ons)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(earlyMs(mOff), "p50-off-ms")
			b.ReportMetric(earlyMs(mOn), "p50-on-ms")
			b.ReportMetric(float64(mOff)/float64(mOn), "off/on")
			b.ReportMetric(earlyMs(mOn-mOff), "on-off-ms")
		})
	}
}

// BenchmarkEarlyOverhead is what early reads cost when they cannot help: the
// programs of BenchmarkEarlyReads with a tool that answers at once, so the
// difference on−off is the PLM pass, the prepares and the futures alone.
// Each iteration runs every program 20 times each way.
func BenchmarkEarlyOverhead(b *testing.B) {
	instant := func(ctx context.Context, args json.RawMessage) (any, error) {
		var a struct {
			Key any `json:"key"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		if k, ok := a.Key.(float64); ok {
			return k + 1, nil
		}
		return 1, nil
	}
	r := spinetest.NewRunner(b, spine.Manifest{"read": {Call: instant, AllowEarlyRead: true}}, nil)
	scenarios := []struct{ name, source, want string }{
		{"a-one", "result = read(key=\"alpha\")\n", "1"},
		{"e-chain3", "a = read(key=\"x\")\nb = read(key=a)\nc = read(key=b)\nresult = c\n", "3"},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			off := spine.Request{Source: sc.source}
			on := spine.Request{Source: sc.source, EarlyReads: true}
			for i := 0; i < 20; i++ { // warm-up
				earlyTimedRun(b, r, off, sc.want)
				earlyTimedRun(b, r, on, sc.want)
			}
			var offs, ons []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < 20; j++ {
					offs = append(offs, earlyTimedRun(b, r, off, sc.want))
					ons = append(ons, earlyTimedRun(b, r, on, sc.want))
				}
			}
			b.StopTimer()
			mOff, mOn := earlyMedian(offs), earlyMedian(ons)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(earlyMs(mOff), "p50-off-ms")
			b.ReportMetric(earlyMs(mOn), "p50-on-ms")
			b.ReportMetric(earlyMs(mOn-mOff), "on-off-ms")
		})
	}
}

// earlyPrefixSource has four reads; the last read's statement is complete
// when the "result" line starts, well over 20 ms before the stream ends.
const earlyPrefixSource = `a = read(key="alpha")
b = read(key="beta")
c = read(key="gamma")
d = read(key="delta")
result = a + b + c + d
`

const (
	earlyChunkBytes = 4                     // about one token
	earlyChunkEvery = 20 * time.Millisecond // 50 tokens per second
)

// BenchmarkEarlyPrefix streams earlyPrefixSource through Request.Stream in
// 4-byte chunks 20 ms apart and measures how long after the last chunk the
// result arrives (p50-prefix-ms). For comparison, the same program sent as
// Source once the stream has ended: early reads off (p50-off-ms), and with
// the PLM pass on (p50-plm-ms). reads-early is the median number of reads
// that started before the last chunk was written.
func BenchmarkEarlyPrefix(b *testing.B) {
	r, reader := earlyBenchRunner(b)
	const want = "19"
	src := []byte(earlyPrefixSource)
	var chunks [][]byte
	for len(src) > 0 {
		n := min(earlyChunkBytes, len(src))
		chunks = append(chunks, src[:n])
		src = src[n:]
	}
	// The last read's statement is complete once "result" starts its line.
	complete := strings.Index(earlyPrefixSource, "result") / earlyChunkBytes
	if margin := time.Duration(len(chunks)-1-complete) * earlyChunkEvery; margin < 20*time.Millisecond {
		b.Fatalf("the last read's statement is complete only %v before the stream ends", margin)
	}

	// stream runs one program in prefix mode and returns the time from the
	// last chunk's write to the result, and the reads started before it.
	stream := func() (time.Duration, int) {
		pr, pw := io.Pipe()
		lastChunk := make(chan time.Time, 1)
		begin := time.Now()
		go func() {
			for i, c := range chunks {
				time.Sleep(time.Until(begin.Add(time.Duration(i) * earlyChunkEvery)))
				if i == len(chunks)-1 {
					lastChunk <- time.Now()
				}
				if _, err := pw.Write(c); err != nil {
					return
				}
			}
			pw.Close()
		}()
		out, err := r.Run(context.Background(), spine.Request{Stream: pr})
		done := time.Now()
		pr.Close()
		if err != nil {
			b.Fatal(err)
		}
		if string(out.Value) != want {
			b.Fatalf("prefix mode: result %s, want %s", out.Value, want)
		}
		last := <-lastChunk
		all, early := reader.startsSince(begin, last)
		if all != 4 {
			b.Fatalf("prefix mode: %d reads, want 4", all)
		}
		return done.Sub(last), early
	}

	off := spine.Request{Source: earlyPrefixSource}
	plm := spine.Request{Source: earlyPrefixSource, EarlyReads: true}
	stream() // warm-up
	earlyTimedRun(b, r, off, want)
	var prefix, offs, plms []time.Duration
	var early []int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, n := stream()
		prefix = append(prefix, d)
		early = append(early, n)
		offs = append(offs, earlyTimedRun(b, r, off, want))
		plms = append(plms, earlyTimedRun(b, r, plm, want))
	}
	b.StopTimer()
	sort.Ints(early)
	mPrefix, mOff := earlyMedian(prefix), earlyMedian(offs)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(earlyMs(mPrefix), "p50-prefix-ms")
	b.ReportMetric(earlyMs(mOff), "p50-off-ms")
	b.ReportMetric(earlyMs(earlyMedian(plms)), "p50-plm-ms")
	b.ReportMetric(float64(mOff)/float64(mPrefix), "off/prefix")
	b.ReportMetric(float64(early[len(early)/2]), "reads-early")
}

// earlyChainSource is the streamed dependent chain: two independent reads,
// some computation, and a read whose key depends on both. In prefix mode a and
// b start while the model writes, and c starts as soon as both values have
// arrived (they are bound to a and b speculatively); the run then only claims.
const earlyChainSource = `a = read(key="alpha")
b = read(key="beta")
total = 0
for i in range(200):
    total += i * i
label = "sum=" + str(total)
c = read(key=str(a) + "-" + str(b))
result = [a, b, c, label]
`

// BenchmarkEarlyPrefixChain streams earlyChainSource at about 50 tokens per
// second with 40 ms reads and reports the time from the last chunk's write to
// the result: p50-prefix-ms (the target is 5 ms or less; without chained reads
// it is one whole read, c's), and p50-off-ms, the whole program sent at once
// with early reads off.
func BenchmarkEarlyPrefixChain(b *testing.B) {
	reader := &earlyReader{delay: 40 * time.Millisecond}
	r := spinetest.NewRunner(b, spine.Manifest{"read": {Call: reader.call, AllowEarlyRead: true}}, nil)
	const want = `[5,4,3,"sum=2646700"]`
	src := []byte(earlyChainSource)
	var chunks [][]byte
	for len(src) > 0 {
		n := min(earlyChunkBytes, len(src))
		chunks = append(chunks, src[:n])
		src = src[n:]
	}
	stream := func() time.Duration {
		pr, pw := io.Pipe()
		lastChunk := make(chan time.Time, 1)
		begin := time.Now()
		go func() {
			for i, c := range chunks {
				time.Sleep(time.Until(begin.Add(time.Duration(i) * earlyChunkEvery)))
				if i == len(chunks)-1 {
					lastChunk <- time.Now()
				}
				if _, err := pw.Write(c); err != nil {
					return
				}
			}
			pw.Close()
		}()
		out, err := r.Run(context.Background(), spine.Request{Stream: pr})
		done := time.Now()
		pr.Close()
		if err != nil {
			b.Fatal(err)
		}
		if string(out.Value) != want {
			b.Fatalf("prefix mode: result %s, want %s", out.Value, want)
		}
		return done.Sub(<-lastChunk)
	}
	off := spine.Request{Source: earlyChainSource}
	stream() // warm-up
	earlyTimedRun(b, r, off, want)
	var prefix, offs []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		prefix = append(prefix, stream())
		offs = append(offs, earlyTimedRun(b, r, off, want))
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(earlyMs(earlyMedian(prefix)), "p50-prefix-ms")
	b.ReportMetric(earlyMs(earlyMedian(offs)), "p50-off-ms")
}

// earlyWholeChainSource is the dependent chain of a whole program: some
// computation, two independent reads, and a read whose key depends on both.
// The program measures how long its call of c waits for the answer.
const earlyWholeChainSource = `import time
total = 0
for i in range(300000):
    total += i * i
a = read(key="alpha")
b = read(key="beta")
t = time.perf_counter()
c = read(key=str(a) + "-" + str(b))
waited = time.perf_counter() - t
result = [a, b, c, total, waited]
`

// BenchmarkEarlyWholeChain runs earlyWholeChainSource with 40 ms reads, sent
// whole, with early reads off, on without the wake (chained reads start only
// where the pass put their prepares), and on. It reports c's wait, from the
// program's call to its answer, and the whole run: with the wake, a and b
// arrive during the computation, the Guest is woken between two bytecodes and
// starts c's read with their values, and the program finds c's value there.
func BenchmarkEarlyWholeChain(b *testing.B) {
	reader := &earlyReader{delay: 40 * time.Millisecond}
	r := spinetest.NewRunner(b, spine.Manifest{"read": {Call: reader.call, AllowEarlyRead: true}}, nil)
	quiet := spinetest.NewRunner(b, spine.Manifest{"read": {Call: reader.call, AllowEarlyRead: true}}, nil)
	spine.NoWake(quiet)
	const want = `[5,4,3,8999955000050000,`
	once := func(r *spine.Runner, early bool) (wait, whole time.Duration) {
		start := time.Now()
		out, err := r.Run(context.Background(), spine.Request{Source: earlyWholeChainSource, EarlyReads: early})
		whole = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if !strings.HasPrefix(string(out.Value), want) {
			b.Fatalf("result %s, want %s...", out.Value, want)
		}
		var v []float64
		if err := json.Unmarshal(out.Value, &v); err != nil || len(v) != 5 {
			b.Fatalf("result %s: %v", out.Value, err)
		}
		return time.Duration(v[4] * float64(time.Second)), whole
	}
	modes := []struct {
		name  string
		r     *spine.Runner
		early bool
	}{{"off", r, false}, {"nowake", quiet, true}, {"on", r, true}}
	waits := make([][]time.Duration, len(modes))
	wholes := make([][]time.Duration, len(modes))
	for _, m := range modes {
		once(m.r, m.early) // warm-up
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, m := range modes {
			w, t := once(m.r, m.early)
			waits[j] = append(waits[j], w)
			wholes[j] = append(wholes[j], t)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for j, m := range modes {
		b.ReportMetric(earlyMs(earlyMedian(waits[j])), "p50-c-wait-"+m.name+"-ms")
		b.ReportMetric(earlyMs(earlyMedian(wholes[j])), "p50-run-"+m.name+"-ms")
	}
}
