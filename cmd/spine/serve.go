package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/cloudstore"
	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/mcpclient"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

const serveUsage = `usage: spine serve [flags]

Serves the HTTP API: POST /v1/run, POST /v1/run/stream, the sessions
(POST /v1/sessions, POST /v1/sessions/{id}/run, GET /v1/sessions/{id}/snapshot,
POST /v1/sessions/restore, DELETE /v1/sessions/{id}), the code-mode tool
(GET /v1/tool, run_python as an agent declares it; POST /v1/tool/call), GET /healthz,
GET /livez, GET /readyz (503 once shutting down) and GET /metrics (docs/http.md;
docs/deploy.md). Each request gets an access log line. Programs call the tools of the MCP
servers in the config file (and the built-in demo tools with --demo-tools).

On SIGINT or SIGTERM it drains: /readyz answers 503 at once, new requests
get 503 with Retry-After, the runs in flight finish or, when --grace ends,
are stopped and answered 503; every session is written to the session
store (or --session-dir); then the listener closes (after SIGTERM, not
before --drain-delay has passed since the signal) and it exits 0.

With a token (--token-file, else $SPINE_TOKEN), every request but /healthz,
/livez and /readyz, /metrics included, must carry "Authorization: Bearer <token>".
Without one it refuses to listen on anything but a loopback address and answers only
requests whose Host is localhost, 127.x.x.x or [::1]. POST /v1/run takes Content-Type
application/json; /v1/run/stream a type such as text/x-python; a restore
application/octet-stream.

flags:
  --listen ADDR            address to listen on (default 127.0.0.1:8080)
  --config FILE            MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools             also the built-in demo tools lookup and prices.list
  --slots N                runs at once; more get 429 (default: the pool size, GOMAXPROCS)
  --stream-slots N         of those, how many streams may hold (default: half, at least 1)
  --stream-idle DURATION   a stream that sends nothing this long is ended with 408 (default 10s)
  --max-timeout DURATION   time limit of every run (default 30s)
  --no-images              run_python (/v1/tool) gives no images, and its description does not
                           promise them (for an agent that does not send images to its model)
  --tool-wait DURATION     how long a run waits for its caller's tool results (default 5m): the
                           tools a request brings ("tools"); then the run is stopped
  --paused N               runs with such tools at once (default 64), each holding a Guest while
                           it waits; more get 429, and each token an even share
  --ask PATTERN            calls of the tools whose names match PATTERN (path.Match: files.*,
                           *.delete) wait for the caller's approval: the run pauses, status
                           approval_required; repeat for several (docs/http.md, "Approvals that wait")
  --replica NAME           this replica's name in its paused runs' ids (default $SPINE_REPLICA),
                           so that a load balancer routes their continuations to it; letters,
                           digits and '-' (docs/scaling.md, "Paused runs")
  --mcp-allow HOST,...     the hosts a run's "mcp_servers" may be on, each a name, *.name or IP
                           address, with :PORT for a port other than 443 (https) or 80 (http);
                           none by default: mcp_servers are refused (docs/http.md)
  --token-file FILE        the bearer token, one word (default $SPINE_TOKEN)
  --tokens-file FILE       the tokens, each with a name and its share of the sessions: sessions,
                           live_sessions, hibernated_memory, session_dir_bytes, and store_bytes
                           (its bytes in --session-store, on every replica) (docs/http.md,
                           "Tenants"); not with --token-file, and $SPINE_TOKEN is ignored
  --max-conns N            connections open at once; more wait to be accepted (default 256);
                           those without the token yet hold a quarter at most, oldest closed
                           first, and read for 5s at most
  --read-timeout DURATION  time to send a request's headers (at most 10s) and body (default 30s)
  --idle-timeout DURATION  how long an idle keep-alive connection stays open (default 60s)
  --grace DURATION         how long shutdown waits for runs in flight (default 30s)
  --metrics-listen ADDR    also serve GET /metrics alone on ADDR, without the token, for a
                           scraper that carries none (docs/deploy.md); off by default
  --drain-delay DURATION   the least time the listener stays open after SIGTERM (default 5s),
                           /readyz answering 503 and new requests refused 503, so that load
                           balancers see it before the port closes; not after SIGINT
  --log-format FORMAT      text or json: the access log (a line per request) and the rest (default text)
  --verbose                also debug lines and the MCP servers' standard error
` + cacheUsage + guestUsage + `
session flags:
  --memory MIB             the memory the process may use (default: its cgroup's limit, e.g. a
                           container's; none: the defaults below): --live-sessions and the
                           hibernated snapshots kept in memory default to what it holds, and a
                           warning says when the flags given take more (docs/deploy.md, "Memory")
  --sessions N             sessions held at once, live and hibernated; more get 503 (default 10000)
  --live-sessions N        of those, how many keep a live Guest (default 64), or what --memory holds
  --session-memory MIB     memory of a session's Guest, 64 to 256 (default 256)
  --session-idle DURATION  an unused session hibernates after this; 0: never by time (default 1m)
  --session-ttl DURATION   an unused session is closed after this; 0: never (default 1h)
  --session-dir DIR        hibernated sessions' snapshots go here, not in memory;
                           without --session-store, sessions are kept here across
                           restarts (written when they hibernate and at shutdown)
  --session-store URL      keep sessions in an object store, shared by every replica:
                           s3://BUCKET?endpoint=..&region=..&use_path_style=true,
                           gs://BUCKET, azblob://CONTAINER, file:///DIR, mem://; the
                           runs paused for their callers are kept there too, and any
                           replica continues them (docs/scaling.md, "Paused runs")
  --session-write POLICY   when a session is written to the store: run (after each
                           run, before answering; default), answer (after answering),
                           hibernate (when it hibernates and when the server stops;
                           the default with --session-dir alone) (docs/scaling.md)
  --session-dir-mib N      the most the files in --session-dir may hold, in MiB (default 16384);
                           without --session-store, half for the hibernated sessions and half
                           for those kept across restarts, removed once unused for --session-ttl

exit codes: 0 stopped by SIGINT or SIGTERM once the runs in flight were
answered and the sessions stored, 2 usage error (a bad config file
included), 4 other failure (the address, the session store; an MCP server
that cannot be reached is connected in the background, /healthz shows it down)
`

// serveOptions are the flags of spine serve.
type serveOptions struct {
	listen      string
	config      string
	demo        bool
	slots       int
	streamSlots int
	streamIdle  time.Duration
	toolWait    time.Duration
	paused      int
	replica     string
	mcpAllow    string
	maxTimeout  time.Duration
	grace       time.Duration
	metrics     string
	drainDelay  time.Duration
	log         logFlags
	cache       cacheFlags
	http        httpFlags
	guest       guestOptions
	ask         askPatterns

	sessions      int
	liveSessions  int
	sessionMemory int // MiB
	sessionIdle   time.Duration
	sessionTTL    time.Duration
	sessionDir    string
	sessionDirMiB int
	sessionStore  string
	sessionWrite  string
	memory        int // MiB
	noImages      bool
}

// defaultSessionTTL is --session-ttl's default. The library's is none; an
// HTTP client may go away without deleting its sessions, which would then
// be kept until --sessions is reached.
const defaultSessionTTL = time.Hour

// maxSessionMemory is the most memory a session may have, in MiB: a run's
// (spine.Options.MemoryLimit's default).
const maxSessionMemory = 256

func (o *serveOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "")
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demo, "demo-tools", false, "")
	fs.IntVar(&o.slots, "slots", 0, "")
	fs.IntVar(&o.streamSlots, "stream-slots", 0, "")
	fs.DurationVar(&o.streamIdle, "stream-idle", service.DefaultStreamIdle, "")
	fs.DurationVar(&o.toolWait, "tool-wait", service.DefaultToolWait, "")
	fs.IntVar(&o.paused, "paused", service.DefaultMaxPaused, "")
	fs.StringVar(&o.replica, "replica", os.Getenv("SPINE_REPLICA"), "")
	fs.StringVar(&o.mcpAllow, "mcp-allow", "", "")
	fs.DurationVar(&o.maxTimeout, "max-timeout", service.DefaultMaxTimeout, "")
	fs.BoolVar(&o.noImages, "no-images", false, "")
	fs.DurationVar(&o.grace, "grace", defaultGrace, "")
	fs.StringVar(&o.metrics, "metrics-listen", "", "")
	fs.DurationVar(&o.drainDelay, "drain-delay", defaultDrainDelay, "")
	o.log.flags(fs)
	o.cache.flags(fs)
	o.guest.flags(fs)
	o.ask.flags(fs)
	o.http = addHTTPFlags(fs)
	fs.IntVar(&o.sessions, "sessions", 10000, "")
	fs.IntVar(&o.liveSessions, "live-sessions", 64, "")
	fs.IntVar(&o.memory, "memory", 0, "")
	fs.IntVar(&o.sessionMemory, "session-memory", maxSessionMemory, "")
	fs.DurationVar(&o.sessionIdle, "session-idle", time.Minute, "")
	fs.DurationVar(&o.sessionTTL, "session-ttl", defaultSessionTTL, "")
	fs.StringVar(&o.sessionDir, "session-dir", "", "")
	fs.IntVar(&o.sessionDirMiB, "session-dir-mib", 16<<10, "")
	fs.StringVar(&o.sessionStore, "session-store", "", "")
	fs.StringVar(&o.sessionWrite, "session-write", "", "")
}

// sessionOptions returns the Runner's SessionOptions the flags set, or why
// they are bad.
func (o *serveOptions) sessionOptions() (spine.SessionOptions, error) {
	if o.sessions < 1 || o.liveSessions < 1 || o.sessionDirMiB < 1 || o.sessionTTL < 0 {
		return spine.SessionOptions{}, errors.New("--sessions and --live-sessions must be positive (and --session-dir-mib), --session-ttl not negative")
	}
	if o.sessionMemory < 64 || o.sessionMemory > maxSessionMemory {
		return spine.SessionOptions{}, fmt.Errorf("--session-memory must be from 64 (what CPython needs) to %d (MiB)", maxSessionMemory)
	}
	idle := o.sessionIdle
	if idle == 0 {
		idle = -1 // never
	}
	return spine.SessionOptions{
		MemoryLimit: uint64(o.sessionMemory) << 20,
		MaxLive:     o.liveSessions,
		Max:         o.sessions,
		Idle:        idle,
		TTL:         o.sessionTTL,
		Dir:         o.sessionDir,
		DirBytes:    uint64(o.sessionDirMiB) << 20,
	}, nil
}

// serveCommand is spine serve.
func serveCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o serveOptions
	fs := flag.NewFlagSet("spine serve", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, serveUsage, 0, stdout, stderr); done {
		return code
	}
	if o.slots < 0 || o.maxTimeout <= 0 || o.grace < 0 || o.drainDelay < 0 {
		return usageError(stderr, fs.Name(), serveUsage, "--slots, --max-timeout, --grace and --drain-delay must not be negative (nor --max-timeout 0)")
	}
	if o.toolWait <= 0 || o.paused <= 0 {
		return usageError(stderr, fs.Name(), serveUsage, "--tool-wait and --paused must be positive")
	}
	if o.replica != "" {
		if err := service.ValidReplica(o.replica); err != nil {
			return usageError(stderr, fs.Name(), serveUsage, "--replica: %v", err)
		}
	}
	mcpAllow := strings.Split(o.mcpAllow, ",")
	if _, err := mcpclient.ParseAllowList(mcpAllow); err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "--mcp-allow: %v", err)
	}
	if o.streamSlots < 0 || o.streamIdle <= 0 {
		return usageError(stderr, fs.Name(), serveUsage, "--stream-slots must not be negative and --stream-idle must be positive")
	}
	limits, err := o.http.limits()
	if err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "%v", err)
	}
	sessions, err := o.sessionOptions()
	if err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "%v", err)
	}
	storeURL, policy, err := o.store()
	if err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "%v", err)
	}
	if o.implicitStore() {
		sessions.DirBytes /= 2 // the other half is the store's (store)
	}
	logger, err := o.log.logger(stderr)
	if err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "%v", err)
	}
	out := o.log.serverLog("spine serve", stderr, logger)
	tenants, err := o.http.tenants("--listen", o.listen, out.lines(slog.LevelWarn))
	if err != nil {
		out.error(err.Error())
		return exitUsage
	}

	ctx, stop := shutdownContext()
	defer stop()
	tracer, stopTracing, err := tracing(ctx, logger)
	if err != nil {
		out.error(err.Error())
		return exitUsage
	}
	defer stopTracing(context.Background())
	if o.memory < 0 {
		return usageError(stderr, fs.Name(), serveUsage, "--memory must not be negative")
	}
	applyMemory(&sessions, flagsSet(fs), o.memory, o.slots, spine.DefaultOptions().MemoryLimit, out)
	var svc *service.Server // made below, before any session: they are made through it
	sessions.OnHibernate = func(s *spine.Session, snapshot io.Reader) { svc.Hibernated(s, snapshot) }
	opts := o.cache.apply(&spine.Options{Sessions: sessions, TracerProvider: tracer}, logger, stderr)
	if err := o.guest.apply(opts); err != nil {
		return usageError(stderr, fs.Name(), serveUsage, "%v", err)
	}
	o.ask.apply(opts)
	runner, manifest, health, closeRunner, code := openRunner(ctx, o.config, o.demo, opts, o.log.servers(stderr), out, true)
	if runner == nil {
		return code
	}
	defer closeRunner()
	checkShares("spine serve", tenants, runner.Options().Sessions, storeURL != "", out.lines(slog.LevelWarn))
	var store sessionstore.Store
	if storeURL != "" {
		if store, err = cloudstore.Open(ctx, storeURL); err != nil {
			out.error("--session-store: " + err.Error())
			return exitFailure
		}
		defer store.Close()
	}
	ln, code := listen(out, "--listen", o.listen, len(tenants) > 0)
	if ln == nil {
		return code
	}
	svc = service.New(runner, &service.Options{
		Slots:       o.slots,
		StreamSlots: o.streamSlots,
		StreamIdle:  o.streamIdle,
		ToolWait:    o.toolWait,
		MaxPaused:   o.paused,
		Replica:     o.replica,
		MCPAllow:    mcpAllow,
		MaxTimeout:  o.maxTimeout,
		Tenants:     tenants,
		Health:      health,
		Logger:      logger,
		MaxSnapshot: int64(spine.MaxSnapshotSize(sessions.MemoryLimit)),
		Tool:        codemode.New(runner, o.toolOptions()),

		SessionStore: store,
		SessionWrite: policy,
	})
	if store != nil && o.implicitStore() && o.sessionTTL > 0 {
		defer expireSessions(store, o.sessionTTL, max(o.sessionTTL, o.toolWait+o.maxTimeout), svc.HoldsSession, logger)()
	}
	if o.metrics != "" {
		stopMetrics, code := serveMetrics(o.metrics, svc.Registry(), out)
		if stopMetrics == nil {
			ln.Close()
			return code
		}
		defer stopMetrics()
	}
	limits.tenants = door.NewTenants(nil, tenants, 0)
	return serveDrained(ctx, stop, ln, svc, door.AccessLog(logger, tracer, svc), serving{
		limits: limits, grace: o.grace, delay: o.drainDelay,
		log: out, what: fmt.Sprintf("(%d tools)", len(manifest)),
	})
}

// store returns the session store's URL and write policy the flags set:
// --session-store, else a directory store in --session-dir written when
// the server stops, so that a restart on it serves the same sessions.
func (o *serveOptions) store() (string, service.WritePolicy, error) {
	write := o.sessionWrite
	if write == "" {
		write = string(service.WriteRun)
		if o.sessionStore == "" {
			write = string(service.WriteHibernate)
		}
	}
	policy, err := service.ParseWritePolicy(write)
	if err != nil {
		return "", "", fmt.Errorf("--session-write: %v", err)
	}
	if o.sessionStore != "" {
		return o.sessionStore, policy, nil
	}
	if o.sessionDir == "" {
		if o.sessionWrite != "" {
			return "", "", errors.New("--session-write needs --session-store or --session-dir")
		}
		return "", "", nil
	}
	dir, err := filepath.Abs(o.sessionDir)
	if err != nil {
		return "", "", err
	}
	// Half of --session-dir-mib is the store's, half the Runner's
	// hibernated snapshots' (serveCommand): the folder holds no more.
	total := int64(o.sessionDirMiB) << 20
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(dir), RawQuery: "max_bytes=" + strconv.FormatInt(total-total/2, 10)}
	return u.String(), service.WriteHibernate, nil
}

// implicitStore reports whether the session store is --session-dir's
// (store): no --session-store.
func (o *serveOptions) implicitStore() bool { return o.sessionStore == "" && o.sessionDir != "" }

// expireSessions removes from the store of --session-dir the sessions
// unused for ttl (sessionstore.Expire): those the Runner closed after its
// --session-ttl, and those stored before a restart and not used since;
// never one the server holds (held), which its Runner closes first. It
// sweeps at once and then every ttl/4 (at most a minute) until the
// returned stop is called, which waits for a sweep under way. Each sweep
// also removes the paused runs kept there (sessionstore.Runs) unwritten
// for runsTTL (expireOnce).
func expireSessions(st sessionstore.Store, ttl, runsTTL time.Duration, held func(id string) bool, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	every := min(max(ttl/4, 10*time.Millisecond), time.Minute)
	go func() {
		defer close(done)
		for {
			n, err := expireOnce(ctx, st, ttl, runsTTL, held)
			if err != nil && ctx.Err() == nil {
				logger.Warn("expiring the sessions of --session-dir failed", "error", err)
			} else if n > 0 {
				logger.Debug("expired the sessions and paused runs of --session-dir unused for --session-ttl", "removed", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// expireOnce is one sweep of expireSessions: the sessions unused for ttl,
// then the paused runs whose keys were last written runsTTL ago or more
// (--tool-wait and --max-timeout past their last pause, at least ttl): kept
// by a drain or a crash for a continuation that never came, or tombstones
// of runs that ended. Without it they stay, and count against the folder's
// bytes, for ever. A run still held whose key goes only loses its
// keeping: its next pause writes it again.
func expireOnce(ctx context.Context, st sessionstore.Store, ttl, runsTTL time.Duration, held func(id string) bool) (int, error) {
	n, err := sessionstore.Expire(ctx, st, time.Now().Add(-ttl), held)
	if err != nil {
		return n, err
	}
	runs, err := sessionstore.Expire(ctx, sessionstore.Runs(st), time.Now().Add(-runsTTL), nil)
	return n + runs, err
}

// startHTTP serves handler on ln, bounded by limits (a zero field means its
// default), and says so on stderr; served receives Serve's error.
func startHTTP(ln net.Listener, handler http.Handler, s serving, onShutdown ...func()) (srv *http.Server, served <-chan error) {
	limits := s.limits.orDefaults()
	srv = &http.Server{
		Handler:           markAuthenticated(limits.tenants, bodyDeadline(limits.readTimeout, handler)),
		ReadHeaderTimeout: min(limits.readTimeout, maxHeaderTimeout),
		IdleTimeout:       limits.idleTimeout,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	if s.log.json != nil { // net/http's own lines (a failed accept, a handler's panic)
		srv.ErrorLog = slog.NewLogLogger(s.log.json.Handler(), slog.LevelWarn)
	}
	for _, f := range onShutdown {
		srv.RegisterOnShutdown(f)
	}
	ln = newLimitListener(ln, limits)
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	s.log.info(fmt.Sprintf("listening on http://%s %s", ln.Addr(), s.what), "addr", ln.Addr().String())
	return srv, errs
}

// toolOptions are the settings of run_python on /v1/tool.
func (o *serveOptions) toolOptions() *codemode.Options {
	opts := &codemode.Options{Timeout: o.maxTimeout}
	if o.noImages {
		opts.MaxImageBytes = -1
	}
	return opts
}
