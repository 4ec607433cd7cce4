package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// loadManifest returns the tools of the built-in demo set plus those of the MCP servers named in the config file at path ("" = demo set only), and a func that closes the MCP sessions.
func loadManifest(ctx context.Context, path string) (spine.Manifest, func(), error) {
	m := demoTools()
	if path == "" {
		return m, func() {}, nil
	}
	cfg, err := readConfig(path)
	if err != nil {
		return nil, nil, err
	}
	for name := range cfg.Servers {
		for tool := range m {
			if tool == name || strings.HasPrefix(tool, name+".") {
				return nil, nil, fmt.Errorf("%w %s: server %q: the name is taken by the built-in tool %s", errConfig, path, name, tool)
			}
		}
	}
	servers, closeAll, err := connectAll(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, tools := range servers {
		for name, spec := range tools {
			m[name] = spec
		}
	}
	return m, closeAll, nil
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
	Env     map[string]string `json:"env,omitempty"`     // added to the inherited environment
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

// connectAll connects to every server at once and lists its tools. On any
// failure it closes the sessions it opened and returns the first error in
// name order.
func connectAll(ctx context.Context, cfg *configFile) ([]spine.Manifest, func(), error) {
	names := make([]string, 0, len(cfg.Servers))
	for name := range cfg.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	manifests := make([]spine.Manifest, len(names))
	sessions := make([]*mcp.ClientSession, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			manifests[i], sessions[i], errs[i] = connect(ctx, name, cfg.Servers[name])
		})
	}
	wg.Wait()
	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			var wg sync.WaitGroup
			for _, s := range sessions {
				if s != nil {
					wg.Go(func() { s.Close() })
				}
			}
			wg.Wait()
		})
	}
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, err
	}
	return manifests, closeAll, nil
}

func connect(ctx context.Context, name string, s serverConfig) (spine.Manifest, *mcp.ClientSession, error) {
	timeout := defaultConnectTimeout
	if s.Timeout != "" {
		timeout, _ = time.ParseDuration(s.Timeout) // checked by readConfig
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var transport mcp.Transport
	if len(s.Command) > 0 {
		// Not CommandContext: the process lives as long as the session, not
		// as long as this connect.
		cmd := exec.Command(s.Command[0], s.Command[1:]...)
		cmd.Dir = s.Dir
		cmd.Stderr = os.Stderr // the server's logs
		if len(s.Env) > 0 {
			cmd.Env = os.Environ()
			for k, v := range s.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		client := http.DefaultClient
		if len(s.Headers) > 0 {
			client = &http.Client{Transport: headerTransport{s.Headers, http.DefaultTransport}}
		}
		transport = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: client, DisableStandaloneSSE: true}
	}
	m, session, err := mcpclient.Connect(ctx, transport, name, &mcpclient.Options{EarlyReads: s.EarlyReads})
	if err != nil {
		return nil, nil, err
	}
	return m, session, nil
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

// openRunner loads the tools of the config file at path and starts a Runner
// on them, for a long-running command (serve, mcp). On failure it reports on
// stderr as cmd and returns the exit code; otherwise close releases the Runner,
// then the MCP sessions.
func openRunner(ctx context.Context, cmd, path string, stderr io.Writer) (runner *spine.Runner, manifest spine.Manifest, close func(), code int) {
	manifest, closeTools, err := loadManifest(ctx, path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		if errors.Is(err, errConfig) {
			return nil, nil, nil, exitUsage
		}
		return nil, nil, nil, exitFailure
	}
	runner, err = spine.New(ctx, manifest, nil)
	if err != nil {
		closeTools()
		fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		return nil, nil, nil, exitFailure
	}
	return runner, manifest, func() {
		runner.Close(context.Background())
		closeTools()
	}, 0
}
