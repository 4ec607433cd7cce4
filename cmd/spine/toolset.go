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
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
	"github.com/spine-run/spine/internal/seed"
	"github.com/spine-run/spine/mcpconfig"
)

// toolset is what a command's programs may call: the tools of the MCP
// servers in the config file, and the demo tools with --demo-tools.
type toolset struct {
	manifest spine.Manifest
	servers  *mcpconfig.Toolset // nil without a config file
}

// close closes the MCP servers: it stops their reconnecting and ends their
// processes. Safe to call more than once.
func (t *toolset) close() { t.servers.Close() }

// health maps each MCP server's name to "" while it is up, else to the error
// its tools fail with (the server is reconnecting).
func (t *toolset) health() map[string]string { return t.servers.Health() }

// serverLogs says where the MCP servers' logs go: their standard error to a
// file each in serverLogDir, and, when verbose, to stderr too, with what the
// config loading left out (keys ignored, tools that need MCP tasks).
type serverLogs struct {
	verbose bool
	stderr  io.Writer
	json    bool // the lines as JSON (--log-format json)
}

// serverLogDir is the folder of the MCP servers' logs: spine/logs in the
// user's state folder ($XDG_STATE_HOME, else ~/.local/state), or "" when
// there is no home.
func serverLogDir() string {
	if dir := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "spine", "logs")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "spine", "logs")
	}
	return ""
}

// loadManifest returns the tools of the MCP servers named in the config file
// at path ("" for none), plus the built-in demo tools when demo is set. An
// error that is the file's fault matches mcpconfig.ErrConfig.
//
// With startDown (serve, mcp), a server that cannot be reached is no error:
// it starts down and connects in the background (mcpconfig.Options.StartDown).
func loadManifest(ctx context.Context, path string, demo bool, logs serverLogs, startDown bool) (*toolset, error) {
	t := &toolset{manifest: spine.Manifest{}}
	var reserved []string
	if demo {
		t.manifest = demoTools()
		reserved = slices.Collect(maps.Keys(t.manifest))
	}
	if path == "" {
		return t, nil
	}
	if logs.stderr == nil {
		logs.stderr = os.Stderr
	}
	opts := &mcpconfig.Options{Reserved: reserved, LogDir: serverLogDir(), CallerOf: tokenCaller, StartDown: startDown}
	// Servers lost (and, verbose, regained, and what was left out); a
	// server's error text is clipped.
	level := slog.LevelWarn
	if logs.verbose {
		level = slog.LevelDebug
		opts.Stderr = logs.stderr
	}
	var h slog.Handler = slog.NewTextHandler(logs.stderr, &slog.HandlerOptions{Level: level})
	if logs.json {
		h = slog.NewJSONHandler(logs.stderr, &slog.HandlerOptions{Level: level})
	}
	opts.Logger = slog.New(door.ClipLogs(h))
	var err error
	t.servers, err = mcpconfig.Load(ctx, path, opts)
	if err != nil {
		if !errors.Is(err, mcpconfig.ErrConfig) && !logs.verbose && opts.LogDir != "" {
			err = fmt.Errorf("%w\n(the servers' standard error is in %s; --verbose shows it here)", err, opts.LogDir)
		}
		return nil, err
	}
	maps.Copy(t.manifest, t.servers.Manifest())
	return t, nil
}

// tokenCaller is the caller of a tool call for the MCP servers: the name of
// the tokens file's token its request came with (spine serve, spine mcp
// --http), or "" — everyone alike — without a tokens file.
func tokenCaller(ctx context.Context) string {
	switch name := door.TokenName(ctx); name {
	case "-", "default":
		return ""
	default:
		return name
	}
}

// loadExitCode is the exit code of a failure to load the tools: a usage error
// when it is the config file's fault, else another failure.
func loadExitCode(err error) int {
	if errors.Is(err, mcpconfig.ErrConfig) {
		return exitUsage
	}
	return exitFailure
}

// The built-in demo set: a price list, read by two tools.

// demoTools returns a fresh manifest of the built-in demo tools.
func demoTools() spine.Manifest {
	return spine.Manifest{
		"lookup": {
			Call:           seed.Lookup,
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
	items := make([]item, 0, len(seed.Prices))
	for k, p := range seed.Prices {
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
// when demo is set), their servers' lines going to logs, and starts a Runner
// on them, for a long-running command (serve, mcp, warm). With startDown, a
// server that cannot be reached does not stop it: it starts down and
// connects in the background (serve, mcp; spine warm prepares the image for
// every tool, so it needs them all). On failure it reports to out and returns
// the exit code; otherwise health reports the MCP servers (toolset.health)
// and close releases the Runner, then the MCP servers.
func openRunner(ctx context.Context, path string, demo bool, opts *spine.Options, logs serverLogs, out serverLog, startDown bool) (runner *spine.Runner, manifest spine.Manifest, health func() map[string]string, close func(), code int) {
	tools, err := loadManifest(ctx, path, demo, logs, startDown)
	if err != nil {
		out.error(err.Error())
		return nil, nil, nil, nil, loadExitCode(err)
	}
	runner, err = spine.New(ctx, tools.manifest, opts)
	if err != nil {
		tools.close()
		out.error(err.Error())
		return nil, nil, nil, nil, exitFailure
	}
	return runner, tools.manifest, tools.health, func() {
		runner.Close(context.Background())
		tools.close()
	}, 0
}
