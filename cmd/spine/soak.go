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
closed standard descriptors, descriptor floods, descriptors left open and
sessions (runs that build on each other, a snapshot restored, hibernation) —
checks that every run got exactly its own outcome, then runs one program that
floods descriptors for --flood, and reports goroutines, open descriptors,
memory mappings and RSS before, during and after (docs/performance.md).

flags:
  --runs N               mixed runs in all (default 30000)
  --concurrency N        runs at once (default 3)
  --flood DURATION       the descriptor-flood run's length; 0 skips it (default 20s)

exit codes: 0 every run got its own outcome and nothing leaked, 2 usage error,
4 otherwise (a wrong outcome, a leak, a failure, an interrupt)
`

// soakOptions are the flags of spine soak.
type soakOptions struct {
	runs        int
	concurrency int
	flood       time.Duration
}

func (o *soakOptions) flags(fs *flag.FlagSet) {
	fs.IntVar(&o.runs, "runs", 30000, "")
	fs.IntVar(&o.concurrency, "concurrency", 3, "")
	fs.DurationVar(&o.flood, "flood", 20*time.Second, "")
}

// soakCommand is spine soak.
func soakCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o soakOptions
	fs := flag.NewFlagSet("spine soak", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, soakUsage, 0, stdout, stderr); done {
		return code
	}
	if o.runs <= 0 || o.concurrency <= 0 || o.flood < 0 {
		return usageError(stderr, fs.Name(), soakUsage, "--runs and --concurrency must be positive, --flood not negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Warm the Go heap to its working size first, so that the before and
	// after of the soak proper compare like with like. (At least one run:
	// soak.Config takes 0 for its default, 30,000.)
	warm := max(min(o.runs/10, 1000), 1)
	if _, err := soak.Run(ctx, soak.Config{Runs: warm, Concurrency: o.concurrency}); err != nil {
		fmt.Fprintln(stderr, "spine soak:", err)
		return exitFailure
	}
	rep, err := soak.Run(ctx, soak.Config{Runs: o.runs, Concurrency: o.concurrency, Flood: o.flood, Progress: stderr})
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
