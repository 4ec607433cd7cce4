package tests

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/internal/spinetest"
)

// chunkReader delivers a program in random chunks of 1 to max bytes, the way
// an LLM's tokens arrive (a UTF-8 character may be split).
type chunkReader struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rng.IntN(c.max), len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestDifferentialPrefixMode: the generated programs of the differential test,
// streamed in random chunkings, end exactly as they do with early reads off.
func TestDifferentialPrefixMode(t *testing.T) {
	n := 100
	if !testing.Short() {
		n = 300
	}
	programs := differentialPrograms(20261130, n)
	runners := map[int]*spine.Runner{0: spinetest.NewRunner(t, differentialManifest(), nil)}
	for _, p := range programs {
		if _, ok := runners[p.Budget]; !ok {
			runners[p.Budget] = spinetest.NewRunner(t, differentialManifest(), &spine.Options{MaxToolCalls: p.Budget})
		}
	}
	var mu sync.Mutex
	failures, early := 0, 0
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := range work {
				p := programs[i]
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				off := differentialRun(runners[p.Budget], p, false)
				stream := &chunkReader{data: []byte(p.Source), rng: rng, max: 1 + rng.IntN(40)}
				on := differentialRunRequest(runners[p.Budget], spine.Request{Stream: stream, Inputs: p.Inputs})
				mu.Lock()
				early += on.earlyStarts
				if strings.HasPrefix(off.Error, "not a Python error") || !differentialEqual(off, on) {
					failures++
					if failures <= 5 {
						inputs, _ := json.Marshal(p.Inputs)
						t.Errorf("program %d (budget %d, inputs %s):\n%s\n--- early reads off:\n%s\n--- prefix mode:\n%s",
							i, p.Budget, inputs, p.Source, off, on)
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	for i := range programs {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d programs; early-read tool runs in prefix mode: %d", len(programs), early)
	if failures > 0 {
		t.Fatalf("%d of %d programs differ", failures, len(programs))
	}
	if early == 0 {
		t.Fatal("prefix mode started no early read in the whole corpus")
	}
}
