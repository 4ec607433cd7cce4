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

With a token (--token-file, else $SPINE_TOKEN), every request but /healthz
must carry "Authorization: Bearer <token>". Without one it refuses to listen
on anything but a loopback address.

flags:
  --listen ADDR            address to listen on (default 127.0.0.1:8080)
  --config FILE            MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools             also the built-in demo tools lookup and prices.list
  --slots N                runs at once; more get 429 (default: the pool size, GOMAXPROCS)
  --stream-slots N         of those, how many streams may hold (default: half, at least 1)
  --stream-idle DURATION   a stream that sends nothing this long is ended with 408 (default 10s)
  --max-timeout DURATION   time limit of every run (default 30s)
  --token-file FILE        the bearer token, one word (default $SPINE_TOKEN)
  --max-conns N            connections open at once; more wait to be accepted (default 256)
  --read-timeout DURATION  time to send a request's headers (at most 10s) and body (default 30s)
  --idle-timeout DURATION  how long an idle keep-alive connection stays open (default 60s)
  --grace DURATION         how long shutdown waits for runs in flight (default 30s)
  --verbose                log every request, not only failures
`

// serveCommand is spine serve.
func serveCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spine serve", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "")
	config := fs.String("config", os.Getenv("SPINE_CONFIG"), "")
	demo := fs.Bool("demo-tools", false, "")
	slots := fs.Int("slots", 0, "")
	streamSlots := fs.Int("stream-slots", 0, "")
	streamIdle := fs.Duration("stream-idle", service.DefaultStreamIdle, "")
	maxTimeout := fs.Duration("max-timeout", service.DefaultMaxTimeout, "")
	grace := fs.Duration("grace", 30*time.Second, "")
	verbose := fs.Bool("verbose", false, "")
	httpFlags := addHTTPFlags(fs)
	if code, done := parseFlags(fs, args, serveUsage, stdout, stderr); done {
		return code
	}
	if *slots < 0 || *maxTimeout <= 0 || *grace < 0 {
		fmt.Fprintf(stderr, "spine serve: --slots, --max-timeout and --grace must not be negative (nor --max-timeout 0)\n\n%s", serveUsage)
		return exitUsage
	}
	if *streamSlots < 0 || *streamIdle <= 0 {
		fmt.Fprintf(stderr, "spine serve: --stream-slots must not be negative and --stream-idle must be positive\n\n%s", serveUsage)
		return exitUsage
	}
	limits, err := httpFlags.limits()
	if err != nil {
		fmt.Fprintf(stderr, "spine serve: %v\n\n%s", err, serveUsage)
		return exitUsage
	}
	token, err := httpFlags.token("--listen", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "spine serve:", err)
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
	svc := service.New(runner, &service.Options{
		Slots:       *slots,
		StreamSlots: *streamSlots,
		StreamIdle:  *streamIdle,
		MaxTimeout:  *maxTimeout,
		Token:       token,
		Health:      health,
		Logger:      logger,
	})
	return serveHTTP(ctx, stop, ln, svc, limits, *grace, "spine serve", fmt.Sprintf("(%d tools)", len(manifest)), stderr)
}

// serveHTTP serves handler on ln until ctx ends (a signal), then shuts down:
// it stops accepting, waits up to grace for the requests in flight, and
// closes what is left. limits bound the connections and the time clients
// take (a zero field means its default). stop restores the signals' default
// behaviour, so that a second Ctrl-C ends the process at once. onShutdown
// functions run (each in its own goroutine) when the shutdown begins.
func serveHTTP(ctx context.Context, stop func(), ln net.Listener, handler http.Handler, limits httpLimits, grace time.Duration, name, what string, stderr io.Writer, onShutdown ...func()) int {
	limits = limits.orDefaults()
	srv := &http.Server{
		Handler:           bodyDeadline(limits.readTimeout, handler),
		ReadHeaderTimeout: min(limits.readTimeout, maxHeaderTimeout),
		IdleTimeout:       limits.idleTimeout,
	}
	for _, f := range onShutdown {
		srv.RegisterOnShutdown(f)
	}
	ln = newLimitListener(ln, limits.maxConns, limits.acceptWait)
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
