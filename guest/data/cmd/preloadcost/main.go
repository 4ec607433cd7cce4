// Command preloadcost measures what preloading a package into the data Guest's image
// costs and saves: for each preload set, a Runner's process memory with its pool
// full, the top of the Guest's heap in the image, New's time, and the pooled-run p50 of
// a program that uses sympy, one that uses numpy and one that uses pandas
// (docs/packages.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/guest/data"
)

var programs = []struct{ name, source string }{
	{"sympy", "import sympy\nx = sympy.Symbol('x')\nresult = str(sympy.integrate(x**2, x))"},
	{"numpy", "import numpy as np\nresult = int(np.arange(10).sum())"},
	{"pandas", "import pandas as pd\nresult = int(pd.DataFrame({'a': [1, 2, 3]})['a'].sum())"},
	{"plain", "result = sum(range(10))"},
}

const heapTop = "result = max(id(o) for o in __import__('gc').get_objects()) / 2**20"

func main() {
	runs := flag.Int("runs", 20, "runs of each program")
	pool := flag.Int("pool", 4, "pooled instances")
	flag.Parse()
	ctx := context.Background()
	var withoutPandas []string
	for _, m := range data.Preload {
		if m != "pandas" {
			withoutPandas = append(withoutPandas, m)
		}
	}
	sets := [][]string{{"_spine_builtins"}, withoutPandas, data.Preload}
	var heads []string
	for _, p := range programs {
		heads = append(heads, "p50 "+p.name+" program (ms)")
	}
	fmt.Printf("| preload | New (s) | RSS, pool of %d full (MiB) | image heap top (MiB) | %s |\n|---|---|---|---|%s\n",
		*pool, strings.Join(heads, " | "), strings.Repeat("---|", len(heads)))
	for _, set := range sets {
		debug.FreeOSMemory()
		before := rss()
		a := data.Artifact()
		a.Preload = set
		start := time.Now()
		r, err := spine.New(ctx, nil, &spine.Options{Artifact: a, PoolSize: *pool, CacheDir: os.Getenv("SPINE_CACHE")})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for r.Stats().PoolReady < *pool {
			time.Sleep(10 * time.Millisecond)
		}
		newTime := time.Since(start)
		debug.FreeOSMemory()
		mem := rss() - before
		out, err := r.Run(ctx, spine.Request{Source: heapTop})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var cells []string
		for _, p := range programs {
			var times []time.Duration
			for i := 0; i < *runs; i++ {
				t := time.Now()
				if _, err := r.Run(ctx, spine.Request{Source: p.source}); err != nil {
					fmt.Fprintln(os.Stderr, p.name, err)
					os.Exit(1)
				}
				times = append(times, time.Since(t))
			}
			slices.Sort(times)
			cells = append(cells, fmt.Sprintf("%.2f", float64(times[len(times)/2])/1e6))
		}
		name := strings.Join(set, ", ")
		if name == "" {
			name = "nothing"
		}
		fmt.Printf("| %s | %.1f | %.0f | %s | %s |\n", name, newTime.Seconds(), mem, out.Value, strings.Join(cells, " | "))
		r.Close(ctx)
	}
}

// rss is the process's resident memory in MiB.
func rss() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
