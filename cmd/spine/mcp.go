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
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/service"
)

const mcpUsage = `usage: spine mcp [flags]

Serves the Model Context Protocol with one tool, run_python(source, inputs,
fresh), whose description lists the Python stubs of the tools a program can
call: the tools of the MCP servers in the config file (and the built-in demo
tools with --demo-tools). Over standard input and output by default; with
--http, over streamable HTTP at http://ADDR/mcp (README, "spine mcp").

Each client (MCP session) has a Python session of its own: what one program
defines is there for the client's next one, until fresh=true, the end of
the MCP session, or a program stopped by --timeout. With --stateless, every
call starts from a clean sandbox.

With --http and a token (--token-file, else $SPINE_TOKEN), every request must
carry "Authorization: Bearer <token>". Without one it refuses to listen on
anything but a loopback address.

flags:
  --http ADDR              serve streamable HTTP on ADDR, e.g. 127.0.0.1:8081
  --config FILE            MCP servers to use as tools (default $SPINE_CONFIG)
  --demo-tools             also the built-in demo tools lookup and prices.list
  --timeout DURATION       time limit of every run (default 30s)
  --slots N                run_python calls at once; more get the tool error "busy, retry" (default: the pool size, GOMAXPROCS)
  --early-reads            start allow-listed read-only tools early
  --stateless              keep nothing from one call to the next: no sessions, no fresh argument
  --max-sessions N         Python sessions kept (default 100); past it one is closed: of the client
                           holding the most, the one it used least recently
  --sessions-per-client N  with --http, Python sessions one client (one address) keeps; past it its own
                           least recently used one is closed (default 0: no cap of its own)
  --token-file FILE        with --http, the bearer token, one word (default $SPINE_TOKEN)
  --max-conns N            with --http, connections open at once; more wait to be accepted (default 256)
  --read-timeout DURATION  with --http, time to send a request's headers (at most 10s) and body (default 30s)
  --idle-timeout DURATION  with --http, how long an idle keep-alive connection stays open (default 60s)
  --grace DURATION         with --http, how long shutdown waits for calls in flight (default 30s)
  --verbose                log the MCP traffic's events, and the MCP servers' standard error, to standard error

exit codes: 0 stopped (standard input closed; with --http, SIGINT or SIGTERM
once the calls in flight finished), 2 usage error (a bad config file
included), 4 other failure (an MCP server, the address, calls still going
after --grace)
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
	sessions   int // --max-sessions
	perClient  int // --sessions-per-client
	grace      time.Duration
	verbose    bool
	http       httpFlags
}

func (o *mcpOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "http", "", "")
	fs.StringVar(&o.config, "config", os.Getenv("SPINE_CONFIG"), "")
	fs.BoolVar(&o.demo, "demo-tools", false, "")
	fs.DurationVar(&o.timeout, "timeout", mcpserver.DefaultTimeout, "")
	fs.IntVar(&o.slots, "slots", 0, "")
	fs.BoolVar(&o.earlyReads, "early-reads", false, "")
	fs.BoolVar(&o.stateless, "stateless", false, "")
	fs.IntVar(&o.sessions, "max-sessions", mcpserver.DefaultMaxSessions, "")
	fs.IntVar(&o.perClient, "sessions-per-client", 0, "")
	fs.DurationVar(&o.grace, "grace", defaultGrace, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
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
	if o.timeout <= 0 || o.grace < 0 || o.slots < 0 || o.sessions <= 0 || o.perClient < 0 {
		return usageError(stderr, fs.Name(), mcpUsage, "--timeout must be positive, --max-sessions too, and --grace and --slots not negative (nor --sessions-per-client)")
	}
	var (
		limits httpLimits
		token  string
	)
	if o.addr != "" {
		var err error
		if limits, err = o.http.limits(); err != nil {
			return usageError(stderr, fs.Name(), mcpUsage, "%v", err)
		}
		if token, err = o.http.token("--http", o.addr); err != nil {
			fmt.Fprintln(stderr, "spine mcp:", err)
			return exitUsage
		}
	}
	logger := newMCPLogger(stderr, o.verbose) // stdout is the protocol's: logs go to stderr only

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner, manifest, _, closeRunner, code := openRunner(ctx, "spine mcp", o.config, o.demo, nil, o.verbose, stderr)
	if runner == nil {
		return code
	}
	defer closeRunner()
	mo := &mcpserver.Options{
		Timeout: o.timeout, Slots: o.slots, EarlyReads: o.earlyReads, Stateless: o.stateless, MaxSessions: o.sessions, Logger: logger,
	}
	if o.addr != "" {
		mo.ClientOf, mo.MaxSessionsPerClient = clientAddress, o.perClient
	}
	server := mcpserver.New(runner, manifest, mo)

	if o.addr == "" {
		// The transport closes its reader when it ends, which unblocks a
		// read in progress: stdin is closed too when it can be.
		in, ok := stdin.(io.ReadCloser)
		if !ok {
			in = io.NopCloser(stdin)
		}
		err := server.Run(ctx, &mcp.IOTransport{Reader: in, Writer: nopWriteCloser{stdout}})
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			fmt.Fprintln(stderr, "spine mcp:", err)
			return exitFailure
		}
		return exitOK
	}

	ln, code := listen("spine mcp", "--http", o.addr, token, stderr)
	if ln == nil {
		return code
	}
	return serveMCP(ctx, stop, ln, server, logger, limits, token, o.grace, fmt.Sprintf("(MCP endpoint http://%s/mcp, %d tools)", ln.Addr(), len(manifest)), stderr)
}

// newMCPLogger returns the logger of spine mcp: nil without --verbose, else
// one that writes every event to w with its texts cut (service.ClipLogs).
func newMCPLogger(w io.Writer, verbose bool) *slog.Logger {
	if !verbose {
		return nil
	}
	return slog.New(service.ClipLogs(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// serveMCP serves server with streamable HTTP at /mcp on ln until ctx ends,
// then shuts down gracefully (serveHTTP): the calls in flight get their
// answers. With a token, every request must carry it (service.RequireToken).
func serveMCP(ctx context.Context, stop func(), ln net.Listener, server *mcp.Server, logger *slog.Logger, limits httpLimits, token string, grace time.Duration, what string, stderr io.Writer) int {
	var handler http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Logger: logger})
	posts := newInFlight()
	handler = posts.count(handler)
	handler = withClientAddress(handler)
	if token != "" {
		handler = service.RequireToken(token, handler)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	return serveHTTP(ctx, stop, ln, mux, limits, grace, "spine mcp", what, stderr,
		func() {
			// A session's open event stream (GET) would keep Shutdown
			// waiting: once the calls in flight (POSTs) have answered, close
			// every session, which ends its stream.
			posts.wait()
			var wg sync.WaitGroup
			for ss := range server.Sessions() {
				wg.Go(func() { ss.Close() })
			}
			wg.Wait()
		})
}

// inFlight counts the POST requests being served.
type inFlight struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled when n drops to 0
	n    int
}

func newInFlight() *inFlight {
	f := &inFlight{}
	f.idle = sync.NewCond(&f.mu)
	return f
}

func (f *inFlight) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		f.mu.Lock()
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				f.idle.Broadcast()
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// wait returns when no POST is being served.
func (f *inFlight) wait() {
	f.mu.Lock()
	for f.n > 0 {
		f.idle.Wait()
	}
	f.mu.Unlock()
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

// clientAddress is the client of an MCP call over HTTP: the address its
// request came from.
func clientAddress(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	return req.Extra.Header.Get(clientAddressHeader)
}
