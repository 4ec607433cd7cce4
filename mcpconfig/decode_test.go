package mcpconfig

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestReadmeConfigs: config files as MCP servers' READMEs and MCP clients
// write them load as they are; each one's servers come out as Spine reads
// them.
func TestReadmeConfigs(t *testing.T) {
	t.Setenv("BRAVE_API_KEY", "brave-key")
	t.Setenv("GITHUB_TOKEN", "gh-token")
	for _, c := range []struct {
		file string
		want map[string]*server
	}{
		{"filesystem.json", map[string]*server{"filesystem": {
			Entry: "filesystem", Namespace: "filesystem",
			Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/Users/username/Desktop", "/path/to/other/allowed/dir"},
			Timeout: defaultTimeout,
		}}},
		{"memory.json", map[string]*server{"memory": {
			Entry: "memory", Namespace: "memory",
			Command: []string{"npx", "-y", "@modelcontextprotocol/server-memory"},
			Env:     map[string]string{"MEMORY_FILE_PATH": "/path/to/custom/memory.jsonl"},
			Timeout: defaultTimeout,
		}}},
		{"github.json", map[string]*server{"github": {
			Entry: "github", Namespace: "github",
			Command: []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"},
			Env:     map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "<YOUR_TOKEN>"},
			Timeout: defaultTimeout,
		}}},
		{"github-remote.json", map[string]*server{"github": {
			Entry: "github", Namespace: "github",
			URL:     "https://api.githubcopilot.com/mcp/",
			Headers: map[string]string{"Authorization": "Bearer YOUR_GITHUB_PAT"},
			Timeout: defaultTimeout,
		}}},
		{"claude-desktop.json", map[string]*server{
			"sequential_thinking": {
				Entry: "sequential-thinking", Namespace: "sequential_thinking",
				Command: []string{"npx", "-y", "@modelcontextprotocol/server-sequential-thinking"},
				Timeout: defaultTimeout,
			},
			"brave_search": {
				Entry: "brave-search", Namespace: "brave_search",
				Command: []string{"npx", "-y", "@modelcontextprotocol/server-brave-search"},
				Env:     map[string]string{"BRAVE_API_KEY": "brave-key"},
				Timeout: defaultTimeout,
			},
		}},
		{"spine.json", map[string]*server{
			"clock": {
				Entry: "time", Namespace: "clock",
				Command:    []string{"uvx", "mcp-server-time", "--local-timezone=America/New_York"},
				EarlyReads: []string{"get_current_time"},
				Timeout:    10 * time.Second,
			},
			"github": {
				Entry: "github", Namespace: "github",
				URL:     "https://api.githubcopilot.com/mcp/",
				Headers: map[string]string{"Authorization": "Bearer gh-token"},
				Tools:   []string{"search_issues", "get_issue"},
				Timeout: defaultTimeout,
			},
			"filesystem": {
				Entry: "filesystem", Namespace: "filesystem",
				Command:      []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"},
				ExcludeTools: []string{"write_file", "edit_file", "move_file"},
				Timeout:      defaultTimeout,
			},
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			cfg := decodeFile(t, c.file)
			if !reflect.DeepEqual(cfg.Servers, c.want) {
				for name, s := range cfg.Servers {
					t.Logf("%s: %+v", name, *s)
				}
				t.Fatalf("servers differ")
			}
		})
	}
}

func decodeFile(t *testing.T, name string) *config {
	t.Helper()
	path := filepath.Join("testdata", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := decode(data, path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestReadmeConfigNotes: what a file has that Spine does not use is noted
// (for --verbose), not an error.
func TestReadmeConfigNotes(t *testing.T) {
	t.Setenv("BRAVE_API_KEY", "k")
	notes := strings.Join(decodeFile(t, "claude-desktop.json").Notes, "\n")
	for _, want := range []string{`ignored the key "globalShortcut"`, `server "fetch": not started: "disabled" is true`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

// TestReadmeConfigErrors: the files that cannot work say why and what to
// change.
func TestReadmeConfigErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		// A server named like a standard module: "import time" would hide it.
		{"cline.json", `server "time": namespace time is the name of a Python standard module: a program's "import time" would hide the server's tools; set "namespace" to "time_mcp"`},
		// A client's prompt for a secret.
		{"vscode.json", `${input:github_token} asks a client to prompt for a value, which Spine cannot: use ${NAME} with an environment variable`},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		_, err = decode(data, c.file)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %q", c.file, err, c.want)
		}
	}
}

// TestClientKeys: keys clients write load; a misspelt Spine key does not.
func TestClientKeys(t *testing.T) {
	cfg, err := decode([]byte(`{"mcpServers": {"a": {
		"command": "x", "args": ["y"], "cwd": "/srv", "type": "stdio", "disabled": false,
		"autoApprove": ["t"], "alwaysAllow": ["t"], "disabledTools": ["u"], "timeout": 60000,
		"trust": true, "description": "d", "someFutureKey": {"x": 1}}}}`), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Servers["a"]; !reflect.DeepEqual(s.Command, []string{"x", "y"}) || s.Dir != "/srv" || s.Timeout != defaultTimeout {
		t.Fatalf("%+v", *s)
	}
	notes := strings.Join(cfg.Notes, "\n")
	for _, want := range []string{`"autoApprove"`, `"someFutureKey"`, `ignored "timeout" 60000`} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %s:\n%s", want, notes)
		}
	}
	for _, c := range []struct{ config, want string }{
		{`{"mcpServers": {"a": {"command": "x", "early_read": ["y"]}}}`, `unknown field "early_read"; did you mean "early_reads"?`},
		{`{"mcpServers": {"a": {"command": "x", "excludeTool": ["y"]}}}`, `did you mean "exclude_tools"?`},
		{`{"mcpServers": {"a": {"command": "x", "nameSpace": "b"}}}`, `did you mean "namespace"?`},
		{`{"mcpServers": {"a": {"command": "x", "envFile": ".env"}}}`, `"envFile" is not read`},
		{`{"mcpServers": {"a": {"command": "x", "tools": ["t"], "exclude_tools": ["u"]}}}`, "keep one"},
		{`{"mcpServers": {"a": {"command": "x", "tools": ["t"], "includeTools": ["t"]}}}`, "keep one"},
		{`{"mcpServers": {"a": {"command": "x", "tools": ["t"], "early_reads": ["u"]}}}`, `early_reads names "u"`},
		{`{"mcpServers": {"a": {"command": "x", "type": "http"}}}`, `"type" is "http" but there is a command`},
		{`{"mcpServers": {"a": {"url": "http://h/", "type": "stdio"}}}`, `"type" is "stdio" but there is a url`},
		{`{"mcpServers": {"a": {"url": "http://h/", "type": "ws"}}}`, `unsupported "type" "ws"`},
		{`{"mcpServers": {"a": {"command": 5}}}`, "command must be a string"},
		{`{"mcpServers": {"a": {"command": ""}}}`, "command is empty"},
		{`{"mcpServers": {"a": {"args": ["x"]}}}`, "args without a command"},
		{`{"mcpServers": {"a": {"command": "x"}}, "servers": {}}`, `both "mcpServers" and "servers"`},
		{`{"mcpServers": {"a-b": {"command": "x"}, "a_b": {"command": "y"}}}`, `servers "a-b" and "a_b" both have the namespace a_b`},
		{`{"mcpServers": {"json": {"command": "x"}}}`, `set "namespace" to "json_mcp"`},
		{`{"mcpServers": {"a": {"command": "x", "namespace": "os"}}}`, `namespace os is the name of a Python standard module`},
		{`{"mcpServers": {"a": {"command": "x", "namespace": "my-ns"}}}`, `namespace "my-ns" must be a Python identifier`},
		{`{"mcpServers": {"print": {"command": "x"}}}`, `set "namespace" to another`},
		{`{"mcpServers": {"a": {"url": "http://h/", "httpUrl": "http://h/"}}}`, "more than one of"},
		{`{"mcpServers": {"a": {"url": "http://h/", "timeout": [1]}}}`, "bad timeout"},
		{`[]`, "cannot unmarshal"},
		{`null`, "not a JSON object"},
		{`{"mcpServers": {"a": 5}}`, "not a JSON object"},
	} {
		_, err := decode([]byte(c.config), "c.json")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %q", c.config, err, c.want)
		}
	}
}

// FuzzDecode: no file makes decode panic, and what it accepts is a server
// Load can connect to.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"servers": {"a": {"command": ["x"], "early_reads": ["y"], "timeout": "1s"}}}`))
	f.Add([]byte(`{"mcpServers": {"a": {"url": "http://h/", "type": "sse", "headers": {"k": "${HOME}"}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := decode(data, "fuzz.json")
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("an error that is not ErrConfig: %v", err)
			}
			return
		}
		for ns, s := range cfg.Servers {
			if ns != s.Namespace || checkNamespace(ns, true) != nil {
				t.Fatalf("namespace %q of %+v", ns, s)
			}
			if (len(s.Command) > 0) == (s.URL != "") || len(s.Command) > 0 && s.Command[0] == "" {
				t.Fatalf("not one transport: %+v", s)
			}
			if s.Timeout <= 0 {
				t.Fatalf("timeout %v", s.Timeout)
			}
		}
	})
}
