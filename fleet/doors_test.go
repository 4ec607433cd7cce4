package fleet_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/fleet"
	"github.com/spine-run/spine/internal/spinetest"
	"github.com/spine-run/spine/mcpserver"
	"github.com/spine-run/spine/service"
	"github.com/spine-run/spine/sessionstore"
)

// The tests of this file run each case on both front doors: the HTTP API
// (package service) and the MCP server (package mcpserver), each a
// translation of its protocol to a Fleet.

var (
	testTools = spinetest.NewTools()
	manifest  = testTools.Manifest()
	gate      = testTools.Gate
)

// A door starts replicas of one front door.
type door struct {
	name string
	// start serves a replica with a Runner of its own on st (nil: none)
	// under write, logging to log.
	start func(t *testing.T, st sessionstore.Store, write fleet.WritePolicy, log *slog.Logger) *replica
}

// A replica is one front door's server, reduced to what the cases need.
type replica struct {
	open  func(t *testing.T) string                             // a new session: its id
	run   func(t *testing.T, id, source string) (string, error) // the run's value, or why it failed
	cut   func()                                                // a drain's grace period ended: cut the runs in flight
	close func(ctx context.Context) error                       // stop: write the sessions, or drop them
}

var doors = []door{{"http", httpReplica}, {"mcp", mcpReplica}}

// maxLive is the live sessions of the Runners newRunner makes (0: the
// default); a test that sets it puts it back.
var maxLive int

// newRunner is a Runner of the test tools whose hibernations call
// hibernated.
func newRunner(t *testing.T, hibernated *func(*spine.Session, io.Reader)) *spine.Runner {
	return spinetest.NewRunner(t, manifest, &spine.Options{Sessions: spine.SessionOptions{
		MemoryLimit: 128 << 20,
		MaxLive:     maxLive,
		OnHibernate: func(s *spine.Session, rd io.Reader) {
			if *hibernated != nil {
				(*hibernated)(s, rd)
			}
		},
	}})
}

// httpReplica is a spine serve replica: service.Server over HTTP.
func httpReplica(t *testing.T, st sessionstore.Store, write fleet.WritePolicy, log *slog.Logger) *replica {
	var hibernated func(*spine.Session, io.Reader)
	r := newRunner(t, &hibernated)
	svc := service.New(r, &service.Options{SessionStore: st, SessionWrite: write, Logger: log})
	hibernated = svc.Hibernated
	url := spinetest.ServeHTTP(t, svc).URL
	post := func(t *testing.T, path, body string) (int, []byte) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	return &replica{
		open: func(t *testing.T) string {
			status, data := post(t, "/v1/sessions", "")
			var info service.SessionInfo
			if status != http.StatusCreated || json.Unmarshal(data, &info) != nil {
				t.Fatalf("POST /v1/sessions: %d %s", status, data)
			}
			return info.ID
		},
		run: func(t *testing.T, id, source string) (string, error) {
			body, _ := json.Marshal(map[string]string{"source": source})
			status, data := post(t, "/v1/sessions/"+id+"/run", string(body))
			var resp service.Response
			if err := json.Unmarshal(data, &resp); err != nil {
				t.Fatalf("%d %s: %v", status, data, err)
			}
			if resp.Error != nil {
				return "", fmt.Errorf("%d %s: %s", status, resp.Error.Kind, resp.Error.Message)
			}
			return string(resp.Value), nil
		},
		cut: func() {
			svc.Drain()
			svc.Cut()
		},
		close: svc.Close,
	}
}

// mcpReplica is a spine mcp replica: mcpserver.Server, over streamable
// HTTP with a store and in memory without one.
func mcpReplica(t *testing.T, st sessionstore.Store, write fleet.WritePolicy, log *slog.Logger) *replica {
	var hibernated func(*spine.Session, io.Reader)
	r := newRunner(t, &hibernated)
	server := mcpserver.NewServer(r, &mcpserver.Options{Store: st, StoreWrite: write, ServerLog: log})
	hibernated = server.Hibernated
	clients := map[string]*mcp.ClientSession{}
	var url string
	if st != nil {
		url = spinetest.ServeHTTP(t, server.HTTPHandler(nil)).URL
	}
	client := func(t *testing.T, id string) *mcp.ClientSession {
		if cs := clients[id]; cs != nil {
			return cs
		}
		cs := spinetest.NewRouter(t, url, "", id).Connect(t)
		clients[id] = cs
		return cs
	}
	return &replica{
		open: func(t *testing.T) string {
			if st == nil {
				cs := spinetest.ConnectInMemory(t, server.MCP())
				clients[cs.ID()] = cs
				return cs.ID()
			}
			cs := spinetest.NewRouter(t, url, "", "").Connect(t)
			clients[cs.ID()] = cs
			return cs.ID()
		},
		run: func(t *testing.T, id, source string) (string, error) {
			res, err := client(t, id).CallTool(t.Context(), &mcp.CallToolParams{Name: mcpserver.ToolName, Arguments: map[string]any{"source": source}})
			if err != nil {
				return "", err
			}
			if res.IsError {
				return "", errors.New(spinetest.Text(res))
			}
			data, _ := json.Marshal(res.StructuredContent)
			var out mcpserver.Result
			if err := json.Unmarshal(data, &out); err != nil {
				t.Fatal(err)
			}
			if out.Notice != "" {
				return "", errors.New(out.Notice)
			}
			return string(out.Value), nil
		},
		cut:   server.Cut,
		close: server.Close,
	}
}

// openStore opens a file:// store in a new directory, for every replica of
// one case.
func openStore(t *testing.T) (string, sessionstore.Store) {
	url := "file://" + t.TempDir()
	return url, open(t, url)
}

// open opens the store at url for one replica.
func open(t *testing.T, url string) sessionstore.Store {
	st, err := sessionstore.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// logs is a logger that keeps its lines.
func logs() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}
