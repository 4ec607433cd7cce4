package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/cloudstore"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/mcpserver"
)

const mcpUsage = `usage: spine mcp [flags]

Serves the Model Context Protocol with one tool, run_python(source, inputs,
fresh), whose description lists the Python stubs of the tools a program can
call: the tools of the MCP servers in the config file (and the built-in demo
tools with --demo-tools). Over standard input and output by default; with
--http, over streamable HTTP at http://ADDR/mcp (docs/mcp.md).

Each client (MCP session) has a Python session of its own: what one program
defines is there for the client's next one, until fresh=true, the end of
the MCP session, or a program stopped by --timeout. With --stateless, every
call starts from a clean sandbox.

With --http and --session-store, the Python sessions live in an object
store shared by every replica: any replica serves any client's MCP session
(Mcp-Session-Id), loading it from the store, and a shutdown writes them
(docs/scaling.md).

With --http and a token (--token-file, else $SPINE_TOKEN, or the tokens of
--tokens-file), every request must carry "Authorization: Bearer <token>" but
GET /healthz, /livez and /readyz (503 once shutting down); GET /metrics is
Prometheus text. Without a token it
refuses to listen on anything but a loopback address. A browser's request
from another origin is refused (403); every request gets an access log line.

flags:
  --http ADDR              serve streamable HTTP on ADDR, e.g. 127.0.0.1:8081
  --config FILE            MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools             also the built-in demo tools lookup and prices.list
  --timeout DURATION       time limit of every run (default 30s)
  --slots N                run_python calls at once; more get the tool error "busy, retry" (default: the pool size, GOMAXPROCS)
  --early-reads            start allow-listed read-only tools early
  --stateless              keep nothing from one call to the next: no sessions, no fresh argument
  --no-images              send no images: image files come as resources like any file (for a
                           client or model that takes no images)
  --ask PATTERN            calls of the tools whose names match PATTERN (path.Match: files.*,
                           *.delete) wait for the user's approval, asked through MCP elicitation;
                           refused when the client cannot ask; repeat for several
  --max-sessions N         Python sessions kept (default 100); past it one is closed: of the client
                           holding the most, the one it used least recently
  --sessions-per-client N  with --http, Python sessions one client (one address; with --tokens-file, one
                           token) keeps; past it its own least recently used one is closed (default 0:
                           no cap of its own; a token's "sessions" in --tokens-file takes its place)
  --token-file FILE        with --http, the bearer token, one word (default $SPINE_TOKEN)
  --tokens-file FILE       with --http, several tokens, each with a name (spine serve's file: docs/http.md,
                           "Tenants"); a client is then its token, its "sessions" its cap, its share
                           of the sessions as spine serve's, and its "store_bytes" the bytes its
                           sessions keep in --session-store; not with --token-file
  --max-conns N            with --http, connections open at once; more wait to be accepted (default 256);
                           those without the token yet hold a quarter at most, oldest closed
                           first, and read for 5s at most
  --read-timeout DURATION  with --http, time to send a request's headers (at most 10s) and body (default 30s)
  --idle-timeout DURATION  with --http, how long an idle keep-alive connection stays open (default 60s)
  --grace DURATION         with --http, how long shutdown waits for calls in flight (default 30s);
                           those still going are then stopped, answered with an error and undone
  --drain-delay DURATION   with --http, the least time the listener stays open after SIGTERM (default 5s),
                           /readyz answering 503 and new requests refused 503, so that load
                           balancers see it before the port closes; not after SIGINT
  --memory MIB             the memory the process may use (default: its cgroup's limit; none: no
                           bound): the Python sessions kept live and the hibernated snapshots
                           kept in memory default to what it holds (docs/deploy.md, "Memory")
  --session-store URL      with --http, keep the Python sessions in an object store shared by every
                           replica: s3://BUCKET?endpoint=..&region=..&use_path_style=true,
                           gs://BUCKET, azblob://CONTAINER, file:///DIR, mem://
  --session-write POLICY   when a session is written to the store: run (after each call, before
                           answering; default), answer (after answering), or hibernate (when it
                           hibernates: --max-sessions puts it aside, or it goes unused; and at
                           shutdown) (docs/scaling.md)
  --log-format FORMAT      text or json: the log on standard error, with --http an access log line per request (default text)
  --verbose                also log the MCP traffic's events, and the MCP servers' standard error
` + cacheUsage + guestUsage + `
exit codes: 0 stopped (standard input closed; with --http, SIGINT or SIGTERM
once every call was answered and every session stored), 2 usage error (a bad
config file included), 4 other failure (the address, the session store, calls
still going after they were stopped; an MCP server that cannot be reached is
connected in the background)
`

// mcpOptions are the flags of spine mcp.
type mcpOptions struct {
	addr       string // --http
	config     string
	demo       bool
	timeout    time.Duration
	slots      int
	earlyReads bool
	stateless  bool
	noImages   bool
	sessions   int // --max-sessions
	perClient  int // --sessions-per-client
	grace      time.Duration
	drainDelay time.Duration
	memory     int    // MiB
	store      string // --session-store
	write      string // --session-write
	log        logFlags
	cache      cacheFlags
	http       httpFlags
	guest      guestOptions
	ask        askPatterns
}

func (o *mcpOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "http", "", "")
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demo, "demo-tools", false, "")
	fs.DurationVar(&o.timeout, "timeout", mcpserver.DefaultTimeout, "")
	fs.IntVar(&o.slots, "slots", 0, "")
	fs.BoolVar(&o.earlyReads, "early-reads", false, "")
	fs.BoolVar(&o.stateless, "stateless", false, "")
	fs.BoolVar(&o.noImages, "no-images", false, "")
	fs.IntVar(&o.sessions, "max-sessions", mcpserver.DefaultMaxSessions, "")
	fs.IntVar(&o.perClient, "sessions-per-client", 0, "")
	fs.DurationVar(&o.grace, "grace", defaultGrace, "")
	fs.DurationVar(&o.drainDelay, "drain-delay", defaultDrainDelay, "")
	fs.IntVar(&o.memory, "memory", 0, "")
	fs.StringVar(&o.store, "session-store", "", "")
	fs.StringVar(&o.write, "session-write", "", "")
	o.log.flags(fs)
	o.cache.flags(fs)
	o.guest.flags(fs)
	o.ask.flags(fs)
	o.http = addHTTPFlags(fs)
}

// mcpCommand is spine mcp.
func mcpCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var o mcpOptions
	fs := flag.NewFlagSet("spine mcp", flag.ContinueOnError)
	o.flags(fs)
	if _, code, done := parseFlags(fs, args, mcpUsage, 0, stdout, stderr); done {
		return code
	}
	if o.timeout <= 0 || o.grace < 0 || o.drainDelay < 0 || o.slots < 0 || o.sessions <= 0 || o.perClient < 0 || o.memory < 0 {
		return usageError(stderr, fs.Name(), mcpUsage, "--timeout must be positive, --max-sessions too, and --grace, --drain-delay, --slots and --memory not negative (nor --sessions-per-client)")
	}
	write, err := o.storeWrite()
	if err != nil {
		return usageError(stderr, fs.Name(), mcpUsage, "%v", err)
	}
	logger, err := o.log.logger(stderr) // stdout is the protocol's: logs go to stderr only
	if err != nil {
		return usageError(stderr, fs.Name(), mcpUsage, "%v", err)
	}
	out := o.log.serverLog("spine mcp", stderr, logger)
	var (
		limits  httpLimits
		tenants []door.Tenant
	)
	if o.addr != "" {
		if limits, err = o.http.limits(); err != nil {
			return usageError(stderr, fs.Name(), mcpUsage, "%v", err)
		}
		if tenants, err = o.http.tenants("--http", o.addr, out.lines(slog.LevelWarn)); err != nil {
			out.error(err.Error())
			return exitUsage
		}
	} else if *o.http.tokensFile != "" || *o.http.tokenFile != "" {
		return usageError(stderr, fs.Name(), mcpUsage, "--token-file and --tokens-file need --http")
	}
	var traffic *slog.Logger // the MCP traffic's events, with --verbose
	if o.log.verbose {
		traffic = logger
	}

	ctx, stop := shutdownContext()
	defer stop()
	tracer, stopTracing, err := tracing(ctx, logger)
	if err != nil {
		out.error(err.Error())
		return exitUsage
	}
	defer stopTracing(context.Background())
	var srv *mcpserver.Server // made below, before any session: they are made through it
	sessions := spine.SessionOptions{OnHibernate: func(s *spine.Session, snapshot io.Reader) { srv.Hibernated(s, snapshot) }}
	sessions.MemoryLimit = spine.DefaultOptions().Sessions.MemoryLimit
	applyMemory(&sessions, flagsSet(fs), o.memory, o.slots, spine.DefaultOptions().MemoryLimit, out)
	opts := o.cache.apply(&spine.Options{TracerProvider: tracer, Sessions: sessions}, logger, stderr)
	if err := o.guest.apply(opts); err != nil {
		return usageError(stderr, fs.Name(), mcpUsage, "%v", err)
	}
	o.ask.apply(opts)
	runner, manifest, health, closeRunner, code := openRunner(ctx, o.config, o.demo, opts, o.log.servers(stderr), out, true)
	if runner == nil {
		return code
	}
	defer closeRunner()
	shares := door.NewTenants(runner, tenants, 0)
	if o.addr != "" {
		checkShares("spine mcp", tenants, runner.Options().Sessions, o.store != "", out.lines(slog.LevelWarn))
	}
	mo := &mcpserver.Options{
		Timeout: o.timeout, Slots: o.slots, EarlyReads: o.earlyReads, Stateless: o.stateless, MaxSessions: o.sessions, Logger: traffic,
		StoreWrite: write, ServerLog: logger,
	}
	if o.noImages {
		mo.MaxImageBytes = -1
	}
	if o.addr != "" {
		mo.ClientOf, mo.MaxSessionsPerClient = clientAddress, o.perClient
		if *o.http.tokensFile != "" {
			mo.ClientOf, mo.SessionsOf = clientToken, tenantSessions(tenants)
		}
		mo.ShareOf = shares.ShareOf
	}
	if o.store != "" {
		if mo.Store, err = cloudstore.Open(ctx, o.store); err != nil {
			out.error("--session-store: " + err.Error())
			return exitFailure
		}
		defer mo.Store.Close()
	}
	srv = mcpserver.NewServer(runner, mo)
	server := srv.MCP()

	if o.addr == "" {
		// The transport closes its reader when it ends, which unblocks a
		// read in progress: stdin is closed too when it can be.
		in, ok := stdin.(io.ReadCloser)
		if !ok {
			in = io.NopCloser(stdin)
		}
		err := server.Run(ctx, &mcp.IOTransport{Reader: in, Writer: nopWriteCloser{stdout}})
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			out.error(err.Error())
			return exitFailure
		}
		return exitOK
	}

	ln, code := listen(out, "--http", o.addr, shares.Len() > 0)
	if ln == nil {
		return code
	}
	m := mcpHTTP{runner: runner, health: health, tenants: shares, log: logger, traffic: traffic, tracer: tracer, stored: mo.Store != nil}
	return serveMCP(ctx, stop, ln, srv, m, serving{
		limits: limits, grace: o.grace, delay: o.drainDelay,
		log: out, what: fmt.Sprintf("(MCP endpoint http://%s/mcp, %d tools)", ln.Addr(), len(manifest)),
	})
}

// storeWrite checks --session-store and --session-write and returns the
// write policy.
func (o *mcpOptions) storeWrite() (fleet.WritePolicy, error) {
	if o.store == "" {
		if o.write != "" {
			return "", errors.New("--session-write needs --session-store")
		}
		return "", nil
	}
	if o.addr == "" || o.stateless {
		return "", errors.New("--session-store needs --http, and sessions (not --stateless)")
	}
	write, err := fleet.ParseWritePolicy(cmp.Or(o.write, string(fleet.WriteRun)))
	if err != nil {
		return "", fmt.Errorf("--session-write: %v", err)
	}
	return write, nil
}

// serveMCP serves srv with streamable HTTP at /mcp on ln until ctx ends
// (a signal), then drains it as spine serve drains (serveDrained):
// /readyz answers 503 and new requests to /mcp 503 while the listener stays
// open, for the drain delay at least; the calls in flight have grace to end,
// and those still going are stopped (mcpserver.Server.Cut: answered with an
// error, their effect on their session undone); every session the store
// lacks is written (m.stored says there is a store); then the listener
// closes. It returns exitOK once every call was answered and every session
// stored. Beside /mcp: GET /healthz (the tools' servers), /livez, /readyz
// (with the MCP servers that are down) and /metrics (the Runner's, Go's and
// the process's). With tokens, every request but the probes must carry one
// (door.Tenants.Require). Every request is refused when a browser sends it
// from another origin (403), and gets a line in the access log.
func serveMCP(ctx context.Context, stop func(), ln net.Listener, srv *mcpserver.Server, m mcpHTTP, s serving) int {
	server := srv.MCP()
	var draining atomic.Bool
	handler := srv.HTTPHandler(&mcp.StreamableHTTPOptions{Logger: m.traffic})
	posts := newInFlight()
	handler = posts.count(&draining, handler)
	handler = withClientAddress(handler)
	s.limits.tenants = m.tenants
	registry := prometheus.NewRegistry()
	registry.MustRegister(door.RunnerCollector(m.runner), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	if m.tenants.Len() > 0 {
		handler = m.tenants.Require(handler)
		metrics = m.tenants.Require(metrics)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", door.RefuseWhileDraining(&draining, handler))
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /livez", door.ServeLive)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			door.ServeReady(&draining, w)
			return
		}
		// Ready, with the MCP servers that are down as detail.
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(door.Probe{Status: "ready", Down: door.DownComponents(m.health)})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { serveMCPHealth(w, m.health, m.tenants.Len() == 0) })
	hs, served := startHTTP(ln, door.AccessLog(m.log, m.tracer, http.NewCrossOriginProtection().Handler(mux)), s)
	code := exitOK
	var delayed <-chan struct{}
	select {
	case err := <-served:
		s.log.error(err.Error())
		code = exitFailure
	case <-ctx.Done():
		stop()
		draining.Store(true)
		delayed = s.drainDelay(ctx)
		s.log.info(fmt.Sprintf("shutting down; waiting up to %v for calls in flight", s.grace), "grace", s.grace.String())
		if !posts.wait(s.grace) {
			s.log.warn(fmt.Sprintf("calls still in flight after %v; stopping them", s.grace))
			srv.Cut()
			if !posts.wait(cutWait) {
				s.log.error("calls still in flight after they were stopped")
				code = exitFailure
			}
		}
	}
	// Every call has its answer: write the sessions the store lacks (or
	// say how many are lost) while the probes still answer, end the MCP
	// sessions (and so their event streams), then close the listener and
	// the idle connections.
	storeCtx, cancel := context.WithTimeout(context.Background(), max(s.grace, cutWait))
	defer cancel()
	if err := srv.Close(storeCtx); err != nil {
		s.log.error("storing the sessions: "+err.Error(), "error", err.Error())
		code = exitFailure
	} else if m.stored {
		s.log.info("sessions stored")
	}
	var wg sync.WaitGroup
	for ss := range server.Sessions() {
		wg.Go(func() { ss.Close() })
	}
	wg.Wait()
	if delayed != nil {
		<-delayed // the listener stays open for the drain delay
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cutWait)
	defer cancel()
	if hs.Shutdown(closeCtx) != nil {
		hs.Close()
	}
	if code == exitOK {
		s.log.info("stopped")
	}
	return code
}

// mcpHTTP is what spine mcp --http serves beside its MCP server.
type mcpHTTP struct {
	runner  *spine.Runner
	health  func() map[string]string // the tools' servers; nil for none
	tenants *door.Tenants            // the tokens; none for none
	log     *slog.Logger             // the access log's and the server's
	traffic *slog.Logger             // the MCP traffic's events (--verbose), or nil
	tracer  trace.TracerProvider     // nil for no spans
	stored  bool                     // the sessions are kept in a session store
}

// serveMCPHealth answers GET /healthz of spine mcp --http: "ok", or
// "degraded" with the servers that are not, always 200 (as spine serve's).
// The error texts, which may name internal addresses, only without a token.
func serveMCPHealth(w http.ResponseWriter, health func() map[string]string, details bool) {
	report := struct {
		Status     string            `json:"status"`
		Components map[string]string `json:"components,omitempty"`
	}{Status: "ok"}
	if health != nil {
		report.Components = map[string]string{}
		for name, problem := range health() {
			switch {
			case problem == "":
				report.Components[name] = "ok"
				continue
			case details:
				report.Components[name] = problem
			default:
				report.Components[name] = "unhealthy"
			}
			report.Status = "degraded"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(report)
}

// inFlight counts the POST requests being served.
type inFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while it is 0
}

func newInFlight() *inFlight { return &inFlight{} }

// count serves the POSTs to h counted, and refuses them once draining:
// 503 with Retry-After, so that a load balancer sends them to another
// replica.
func (f *inFlight) count(draining *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		if draining.Load() {
			f.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			http.Error(w, "the server is draining (shutting down); send the request to another replica", http.StatusServiceUnavailable)
			return
		}
		if f.n++; f.n == 1 {
			f.idle = make(chan struct{})
		}
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.idle)
				f.idle = nil
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// wait waits up to d until no POST is being served; it reports whether
// none is.
func (f *inFlight) wait(d time.Duration) bool {
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	if idle == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// nopWriteCloser is stdout for the stdio transport, which closes its writer
// at the end: the process's stdout stays open.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// clientAddressHeader carries, from withClientAddress to clientAddress, the
// address a request came from: the client the MCP server shares its
// sessions among (mcpserver.Options.ClientOf). It is set on every request,
// over whatever the client sent in it.
const clientAddressHeader = "Spine-Client-Address"

// withClientAddress sets clientAddressHeader to the IP address r came from.
func withClientAddress(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		r.Header.Set(clientAddressHeader, host)
		h.ServeHTTP(w, r)
	})
}

// clientToken is the client of an MCP call over HTTP with a tokens file:
// the name of the token its request carried.
func clientToken(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	return door.RequestToken(req.Extra.Header)
}

// tenantSessions returns the cap of each tenant's MCP sessions, by name:
// its "sessions" in the tokens file (0: --sessions-per-client's).
func tenantSessions(tenants []door.Tenant) func(string) int {
	caps := map[string]int{}
	for _, t := range tenants {
		caps[t.Name] = t.Limits.Sessions
	}
	return func(name string) int { return caps[name] }
}

// clientAddress is the client of an MCP call over HTTP: the address its
// request came from.
func clientAddress(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	return req.Extra.Header.Get(clientAddressHeader)
}
