package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spine-run/spine/service"
)

const serveUsage = `usage: spine serve [flags]

Serves the HTTP API: POST /v1/run, POST /v1/run/stream, GET /healthz and
GET /metrics (README, "spine serve"). Programs call the tools of the MCP
servers in the config file (and the built-in demo tools with --demo-tools).
On SIGINT or SIGTERM it stops accepting requests, lets the runs in flight
finish (up to --grace) and exits.

flags:
  --listen ADDR          address to listen on (default 127.0.0.1:8080)
  --config FILE          MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools           also the built-in demo tools lookup and prices.list
  --slots N              runs at once; more get 429 (default: the pool size, GOMAXPROCS)
  --max-timeout DURATION time limit of every run (default 30s)
  --grace DURATION       how long shutdown waits for runs in flight (default 30s)
  --verbose              log every request, not only failures
`

// serveCommand is spine serve.
func serveCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "")
	config := fs.String("config", os.Getenv("SPINE_CONFIG"), "")
	demo := fs.Bool("demo-tools", false, "")
	slots := fs.Int("slots", 0, "")
	maxTimeout := fs.Duration("max-timeout", service.DefaultMaxTimeout, "")
	grace := fs.Duration("grace", 30*time.Second, "")
	verbose := fs.Bool("verbose", false, "")
	if code, done := parseFlags(fs, args, serveUsage, stdout, stderr); done {
		return code
	}
	if *slots < 0 || *maxTimeout <= 0 || *grace < 0 {
		fmt.Fprintf(stderr, "spine serve: --slots, --max-timeout and --grace must not be negative (nor --max-timeout 0)\n\n%s", serveUsage)
		return exitUsage
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner, manifest, health, closeRunner, code := openRunner(ctx, "spine serve", *config, *demo, stderr)
	if runner == nil {
		return code
	}
	defer closeRunner()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "spine serve:", err)
		return exitFailure
	}
	svc := service.New(runner, &service.Options{Slots: *slots, MaxTimeout: *maxTimeout, Health: health, Logger: logger})
	return serveHTTP(ctx, stop, ln, svc, *grace, "spine serve", fmt.Sprintf("(%d tools)", len(manifest)), stderr)
}

// serveHTTP serves handler on ln until ctx ends (a signal), then shuts down:
// it stops accepting, waits up to grace for the requests in flight, and
// closes what is left. stop restores the signals' default behaviour, so that
// a second Ctrl-C ends the process at once. onShutdown functions run (each in
// its own goroutine) when the shutdown begins.
func serveHTTP(ctx context.Context, stop func(), ln net.Listener, handler http.Handler, grace time.Duration, name, what string, stderr io.Writer, onShutdown ...func()) int {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	for _, f := range onShutdown {
		srv.RegisterOnShutdown(f)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "%s: listening on http://%s %s\n", name, ln.Addr(), what)
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFailure
	case <-ctx.Done():
	}
	stop()
	fmt.Fprintf(stderr, "%s: shutting down; waiting up to %v for requests in flight\n", name, grace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		fmt.Fprintf(stderr, "%s: requests still in flight after %v; stopping them\n", name, grace)
		srv.Close()
		return exitFailure
	}
	fmt.Fprintf(stderr, "%s: stopped\n", name)
	return exitOK
}
