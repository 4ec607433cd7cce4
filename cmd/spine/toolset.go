package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// toolset is what a command's programs may call: the manifest, and the MCP
// servers behind it.
type toolset struct {
	manifest spine.Manifest
	// close closes the MCP servers: it stops their reconnecting and ends
	// their processes. Safe to call more than once.
	close func()
	// health maps each MCP server's name to "" while it is up, else to the
	// error its tools fail with (the server is reconnecting).
	health func() map[string]string
}

// loadManifest returns the tools of the MCP servers named in the config file
// at path ("" for none), plus the built-in demo tools when demo is set.
func loadManifest(ctx context.Context, path string, demo bool) (*toolset, error) {
	m := spine.Manifest{}
	if demo {
		m = demoTools()
	}
	if path == "" {
		return &toolset{manifest: m, close: func() {}, health: func() map[string]string { return map[string]string{} }}, nil
	}
	cfg, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	for name := range cfg.Servers {
		for tool := range m {
			if tool == name || strings.HasPrefix(tool, name+".") {
				return nil, fmt.Errorf("%w %s: server %q: the name is taken by the built-in tool %s", errConfig, path, name, tool)
			}
		}
	}
	names, servers, closeAll, err := connectAll(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, server := range servers {
		maps.Copy(m, server.Tools())
	}
	health := func() map[string]string {
		h := make(map[string]string, len(servers))
		for i, server := range servers {
			h[names[i]] = ""
			if err := server.Err(); err != nil {
				h[names[i]] = err.Error()
			}
		}
		return h
	}
	return &toolset{manifest: m, close: closeAll, health: health}, nil
}

// errConfig wraps every error that is the config file's fault (not a server's).
var errConfig = errors.New("config")

// configFile is the JSON file --config names (README, "MCP servers as tools").
type configFile struct {
	Servers map[string]serverConfig `json:"servers"`
}

// serverConfig is one MCP server: a command run with stdio, or a URL spoken to
// with streamable HTTP.
type serverConfig struct {
	Command []string          `json:"command,omitempty"` // program and arguments, stdio transport
	Env     map[string]string `json:"env,omitempty"`     // added to the few variables passed on (serverEnvVars)
	Dir     string            `json:"dir,omitempty"`     // working folder of the command

	URL     string            `json:"url,omitempty"`     // streamable HTTP endpoint
	Headers map[string]string `json:"headers,omitempty"` // sent with every HTTP request

	EarlyReads []string `json:"early_reads,omitempty"` // MCP tool names that may be read early

	Timeout string `json:"timeout,omitempty"` // to connect and list tools; default 30s
}

const defaultConnectTimeout = 30 * time.Second

func readConfig(path string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	var cfg configFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w %s: %w", errConfig, path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w %s: more than one JSON value", errConfig, path)
	}
	for name, s := range cfg.Servers {
		if mcpclient.PythonName(name) != name {
			return nil, fmt.Errorf("%w %s: server name %q must be a Python identifier: it is the namespace of its tools", errConfig, path, name)
		}
		switch {
		case len(s.Command) > 0 && s.URL != "":
			return nil, fmt.Errorf("%w %s: server %q has both a command and a url", errConfig, path, name)
		case len(s.Command) == 0 && s.URL == "":
			return nil, fmt.Errorf("%w %s: server %q needs a command (stdio) or a url (streamable HTTP)", errConfig, path, name)
		case len(s.Command) > 0 && len(s.Headers) > 0:
			return nil, fmt.Errorf("%w %s: server %q: headers are for a url", errConfig, path, name)
		case s.URL != "" && (len(s.Env) > 0 || s.Dir != ""):
			return nil, fmt.Errorf("%w %s: server %q: env and dir are for a command", errConfig, path, name)
		}
		if s.URL != "" {
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%w %s: server %q: url %q is not an http(s) URL", errConfig, path, name, s.URL)
			}
		}
		for _, values := range []map[string]string{s.Env, s.Headers} {
			for k, v := range values {
				expanded, err := expandVars(v)
				if err != nil {
					return nil, fmt.Errorf("%w %s: server %q: %s: %v", errConfig, path, name, k, err)
				}
				values[k] = expanded
			}
		}
		if s.Timeout != "" {
			if d, err := time.ParseDuration(s.Timeout); err != nil || d <= 0 {
				return nil, fmt.Errorf("%w %s: server %q: bad timeout %q", errConfig, path, name, s.Timeout)
			}
		}
	}
	return &cfg, nil
}

// expandVars replaces each ${NAME} in s with spine's environment variable
// NAME, so that secrets need not be written in the config file. A variable
// that is not set is an error; a "$" not followed by "{" stays as it is.
func expandVars(s string) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unclosed ${ in %q", s)
		}
		name := s[i+2 : i+end]
		value, ok := os.LookupEnv(name)
		if !ok || name == "" {
			return "", fmt.Errorf("environment variable %q is not set", name)
		}
		b.WriteString(s[:i])
		b.WriteString(value)
		s = s[i+end+1:]
	}
}

// connectAll connects to every server at once and lists its tools; it
// returns the servers in name order. On any failure it closes the servers it
// connected and returns the first error in name order.
func connectAll(ctx context.Context, cfg *configFile) ([]string, []*mcpclient.Server, func(), error) {
	names := slices.Sorted(maps.Keys(cfg.Servers))
	servers := make([]*mcpclient.Server, len(names))
	errs := make([]error, len(names))
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			servers[i], errs[i] = connect(ctx, name, cfg.Servers[name], logger)
		})
	}
	wg.Wait()
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			var wg sync.WaitGroup
			for _, s := range servers {
				if s != nil {
					wg.Go(func() { s.Close() })
				}
			}
			wg.Wait()
		})
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return names, servers, closeAll, nil
}

// serverEnvVars are the variables of spine's environment that a server's
// command gets, when set, besides the config's env: spine's own secrets (the
// ones the config's ${NAME} reads, keys of other servers) are not passed on.
var serverEnvVars = []string{"HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM"}

// commandEnv is the environment of a server's command with the config's env.
func commandEnv(env map[string]string) []string {
	out := []string{} // not nil: nil would inherit everything
	for _, name := range serverEnvVars {
		if v, ok := os.LookupEnv(name); ok {
			out = append(out, name+"="+v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		out = append(out, name+"="+env[name])
	}
	return out
}

// connect dials one server: its first connection and the listing of its
// tools have the server's timeout, and so does each reconnection.
func connect(ctx context.Context, name string, s serverConfig, logger *slog.Logger) (*mcpclient.Server, error) {
	timeout := defaultConnectTimeout
	if s.Timeout != "" {
		timeout, _ = time.ParseDuration(s.Timeout) // checked by readConfig
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var transport func() mcp.Transport
	if len(s.Command) > 0 {
		transport = func() mcp.Transport {
			// Not CommandContext: the process lives as long as the session,
			// not as long as a connection's context.
			cmd := exec.Command(s.Command[0], s.Command[1:]...)
			cmd.Dir = s.Dir
			cmd.Env = commandEnv(s.Env)
			cmd.Stderr = os.Stderr // the server's logs
			return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
		}
	} else {
		client := http.DefaultClient
		if len(s.Headers) > 0 {
			client = &http.Client{Transport: headerTransport{s.Headers, http.DefaultTransport}}
		}
		transport = func() mcp.Transport {
			return &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true}
		}
	}
	return mcpclient.Dial(ctx, transport, name, &mcpclient.Options{EarlyReads: s.EarlyReads, ConnectTimeout: timeout, Logger: logger})
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// The built-in demo set: a price list, read by two tools.

// prices is the demo's data, read by the lookup and prices.list tools.
var prices = map[string]int{"book": 21, "pen": 2}

// demoTools returns a fresh manifest of the built-in demo tools.
func demoTools() spine.Manifest {
	return spine.Manifest{
		"lookup": {
			Call:           lookup,
			AllowEarlyRead: true,
			Description:    "Look up the price of an item by key.",
			InputSchema:    json.RawMessage(`{"type":"object","properties":{"key":{"type":"string","description":"the item, e.g. \"book\""}},"required":["key"]}`),
		},
		"prices.list": {
			Call:           listPrices,
			AllowEarlyRead: true,
			Description:    "List every item and its price, cheapest first; at most limit items when limit is given.",
			InputSchema:    json.RawMessage(`{"type":"object","properties":{"limit":{"type":["integer","null"],"minimum":0,"description":"how many items at most"}}}`),
		},
	}
}

func lookup(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("lookup: bad arguments: %v", err)
	}
	price, ok := prices[a.Key]
	if !ok {
		return nil, fmt.Errorf("no such key: %q", a.Key)
	}
	return price, nil
}

func listPrices(ctx context.Context, args json.RawMessage) (any, error) {
	var a struct {
		Limit *int `json:"limit"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return nil, fmt.Errorf("prices.list: bad arguments: %v", err)
	}
	type item struct {
		Key   string `json:"key"`
		Price int    `json:"price"`
	}
	items := make([]item, 0, len(prices))
	for k, p := range prices {
		items = append(items, item{k, p})
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].Price != items[j].Price {
			return items[i].Price < items[j].Price
		}
		return items[i].Key < items[j].Key
	})
	if a.Limit != nil {
		if *a.Limit < 0 {
			return nil, errors.New("prices.list: limit must not be negative")
		}
		if *a.Limit < len(items) {
			items = items[:*a.Limit]
		}
	}
	return items, nil
}

// openRunner loads the tools of the config file at path (and the demo tools
// when demo is set) and starts a Runner on them, for a long-running command
// (serve, mcp). On failure it reports on stderr as cmd and returns the exit
// code; otherwise health reports the MCP servers (toolset.health) and close
// releases the Runner, then the MCP servers.
func openRunner(ctx context.Context, cmd, path string, demo bool, stderr io.Writer) (runner *spine.Runner, manifest spine.Manifest, health func() map[string]string, close func(), code int) {
	tools, err := loadManifest(ctx, path, demo)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		if errors.Is(err, errConfig) {
			return nil, nil, nil, nil, exitUsage
		}
		return nil, nil, nil, nil, exitFailure
	}
	runner, err = spine.New(ctx, tools.manifest, nil)
	if err != nil {
		tools.close()
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return nil, nil, nil, nil, exitFailure
	}
	return runner, tools.manifest, tools.health, func() {
		runner.Close(context.Background())
		tools.close()
	}, 0
}
