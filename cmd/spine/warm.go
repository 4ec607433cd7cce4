package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spine-run/spine"
)

const warmUsage = `usage: spine warm [flags]

Fills the compilation cache ahead of time: compiles the Guest for this
machine's CPU, prepares the image runs start from (for the tools of
--config and --demo-tools, as spine serve with the same flags would), runs
one program, and exits; with --guest, --packages and --preload, for the
Guest and image spine serve and spine mcp with the same flags use. A
container image built with the cache it fills
(--cache-dir, or --cache-seed at run time) starts its first run without
compiling (docs/deploy.md).

flags:
  --config FILE            MCP servers whose tools the image is prepared for (default $SPINE_CONFIG)
  --demo-tools             also the built-in demo tools lookup and prices.list
` + cacheUsage + guestUsage + `
exit codes: 0 ok, 2 usage error, 4 other failure
`

// warmOptions are the flags of spine warm.
type warmOptions struct {
	cache  cacheFlags
	config string
	demo   bool
	guest  guestOptions
}

func (o *warmOptions) flags(fs *flag.FlagSet) {
	o.cache.flags(fs)
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demo, "demo-tools", false, "")
	o.guest.flags(fs)
}

// warmCommand is spine warm.
func warmCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o warmOptions
	fs := flag.NewFlagSet("spine warm", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, warmUsage, 0, stdout, stderr); done {
		return code
	}
	cache, config, demo := o.cache, o.config, o.demo
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	opts := cache.apply(&spine.Options{PoolSize: 1}, nil, stderr)
	if err := o.guest.apply(opts); err != nil {
		return usageError(stderr, fs.Name(), warmUsage, "%v", err)
	}
	runner, _, _, closeRunner, code := openRunner(ctx, config, demo, opts, serverLogs{stderr: stderr}, serverLog{name: "spine warm", w: stderr}, false)
	if runner == nil {
		return code
	}
	defer closeRunner()
	if _, err := runner.Run(ctx, spine.Request{Source: "1 + 1"}); err != nil {
		fmt.Fprintln(stderr, "spine warm:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "spine warm: cache ready in %s (%v)\n", cacheDirName(opts.CacheDir), time.Since(start).Round(time.Millisecond))
	return exitOK
}

// cacheDirName is the cache folder --cache-dir dir names, for messages.
func cacheDirName(dir string) string {
	if dir != "" {
		return dir
	}
	if base, err := os.UserCacheDir(); err == nil {
		return base + "/spine"
	}
	return "memory"
}
