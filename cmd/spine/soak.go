package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spine-run/spine/internal/soak"
)

const soakUsage = `usage: spine soak [flags]

Makes many mixed runs at once on one Runner — ordinary ones, Python errors,
tool errors, early reads, time-outs, memory bombs, exits, stack overflows,
closed standard descriptors, descriptor floods and descriptors left open —
checks that every run got exactly its own outcome, then runs one program that
floods descriptors for --flood, and reports goroutines, open descriptors,
memory mappings and RSS before, during and after (docs/performance.md).

flags:
  --runs N               mixed runs in all (default 30000)
  --concurrency N        runs at once (default 3)
  --flood DURATION       the descriptor-flood run's length; 0 skips it (default 20s)

exit codes: 0 every run got its own outcome and nothing leaked, 4 otherwise
`

// soakCommand is spine soak.
func soakCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine soak", flag.ContinueOnError)
	runs := fs.Int("runs", 30000, "")
	concurrency := fs.Int("concurrency", 3, "")
	flood := fs.Duration("flood", 20*time.Second, "")
	if code, done := parseFlags(fs, args, soakUsage, stdout, stderr); done {
		return code
	}
	if *runs <= 0 || *concurrency <= 0 || *flood < 0 {
		fmt.Fprintf(stderr, "spine soak: --runs and --concurrency must be positive, --flood not negative\n\n%s", soakUsage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Warm the Go heap to its working size first, so that the before and
	// after of the soak proper compare like with like.
	if _, err := soak.Run(ctx, soak.Config{Runs: min(*runs/10, 1000), Concurrency: *concurrency}); err != nil {
		fmt.Fprintln(stderr, "spine soak:", err)
		return exitFailure
	}
	rep, err := soak.Run(ctx, soak.Config{Runs: *runs, Concurrency: *concurrency, Flood: *flood, Progress: stderr})
	if err != nil {
		fmt.Fprintln(stderr, "spine soak:", err)
		return exitFailure
	}
	rep.Print(stdout)
	if rep.Failed > 0 || rep.Leaked() {
		fmt.Fprintln(stderr, "spine soak: FAILED: a run got another's outcome, or the process did not give back what it took")
		return exitFailure
	}
	return exitOK
}
