package mcpconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// config is the file, checked: the servers to connect to, by namespace.
type config struct {
	Servers map[string]*server // by namespace; disabled entries left out
	Notes   []string           // keys ignored, entries disabled: for a verbose log
}

// server is one MCP server: a command run with stdio, or a URL spoken to with
// streamable HTTP or SSE.
type server struct {
	Entry     string // its key in the file, for messages
	Namespace string

	Command []string          // program and arguments, stdio transport
	Env     map[string]string // added to the few variables passed on (envVars)
	Dir     string            // working folder of the command

	URL     string            // HTTP endpoint
	SSE     bool              // the URL speaks the older HTTP+SSE transport
	Headers map[string]string // sent with every HTTP request

	EarlyReads   []string // MCP tool names that may be read early
	Tools        []string // only these MCP tools, when not nil
	ExcludeTools []string // not these MCP tools

	Timeout time.Duration // to connect and list tools
}

const defaultTimeout = 30 * time.Second

// entry is one server's object as the file has it: Spine's keys and those of
// the MCP clients whose files it reads as they are.
type entry struct {
	Type          string            `json:"type"`          // "stdio", "http", "streamable-http", "sse"
	TransportType string            `json:"transportType"` // the same, as some clients spell it
	Command       json.RawMessage   `json:"command"`       // a string (with args) or Spine's array
	Args          []string          `json:"args"`
	Env           map[string]string `json:"env"`
	Dir           string            `json:"dir"`
	Cwd           string            `json:"cwd"`
	URL           string            `json:"url"`
	HTTPURL       string            `json:"httpUrl"`   // streamable HTTP, as one client spells it
	ServerURL     string            `json:"serverUrl"` // as another spells it
	Headers       map[string]string `json:"headers"`
	Disabled      bool              `json:"disabled"`
	Timeout       json.RawMessage   `json:"timeout"`

	Namespace    string   `json:"namespace"`
	EarlyReads   []string `json:"early_reads"`
	Tools        []string `json:"tools"`
	ExcludeTools []string `json:"exclude_tools"`
	IncludeTools []string `json:"includeTools"` // a client's name for tools
	ExcludeAlias []string `json:"excludeTools"` // a client's name for exclude_tools
}

// ignoredKeys are keys MCP clients write in a server's entry that mean
// nothing to Spine: approvals (Spine's tools run without asking), a client's
// own switches and labels. They are read and ignored.
var ignoredKeys = []string{
	"autoApprove", "alwaysAllow", "disabledTools", "trust", "description",
	"name", "icon", "oauth", "auth", "authProviderType", "networkTimeout",
	"gallery", "version",
}

// spineKeys are Spine's own keys of an entry: an unknown key close to one of
// them is a typo and an error, not a client's key to ignore.
var spineKeys = []string{"namespace", "early_reads", "tools", "exclude_tools", "command", "args", "env", "dir", "url", "headers", "timeout"}

// decode reads and checks a config file's bytes; path is only for messages.
// ${NAME} in env and headers values is replaced by the environment
// variable.
func decode(data []byte, path string) (*config, error) {
	fail := func(format string, args ...any) (*config, error) {
		return nil, fmt.Errorf("%w %s: %s", ErrConfig, path, fmt.Sprintf(format, args...))
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		return fail("%v", err)
	}
	if dec.More() {
		return fail("more than one JSON value")
	}
	if top == nil {
		return fail("the file is not a JSON object")
	}
	var entries map[string]json.RawMessage
	for _, key := range []string{"mcpServers", "servers"} {
		raw, ok := top[key]
		if !ok {
			continue
		}
		if entries != nil {
			return fail(`both "mcpServers" and "servers": keep one`)
		}
		if err := json.Unmarshal(raw, &entries); err != nil {
			return fail("%s: %v", key, err)
		}
		if entries == nil {
			entries = map[string]json.RawMessage{}
		}
	}
	cfg := &config{Servers: map[string]*server{}}
	for _, key := range slices.Sorted(maps.Keys(top)) {
		if key != "mcpServers" && key != "servers" {
			cfg.Notes = append(cfg.Notes, fmt.Sprintf("ignored the key %q: Spine reads only \"mcpServers\" (or \"servers\")", key))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		s, notes, err := decodeEntry(name, entries[name])
		if err != nil {
			return fail("server %q: %v", name, err)
		}
		for _, n := range notes {
			cfg.Notes = append(cfg.Notes, fmt.Sprintf("server %q: %s", name, n))
		}
		if s == nil {
			continue
		}
		if other, ok := cfg.Servers[s.Namespace]; ok {
			return fail("servers %q and %q both have the namespace %s: set \"namespace\" of one of them", other.Entry, name, s.Namespace)
		}
		cfg.Servers[s.Namespace] = s
	}
	return cfg, nil
}

// decodeEntry checks one server's entry; a disabled one is nil.
func decodeEntry(name string, raw json.RawMessage) (*server, []string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	notes, err := checkKeys(fields)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := fields["envFile"]; ok {
		return nil, nil, fmt.Errorf(`"envFile" is not read: put the variables in "env" (values may be ${NAME})`)
	}
	var e entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, nil, err
	}
	if e.Disabled {
		return nil, append(notes, `not started: "disabled" is true`), nil
	}

	s := &server{Entry: name, Env: e.Env, Headers: e.Headers, EarlyReads: e.EarlyReads}

	// The namespace: "namespace", else the entry's name made a Python
	// identifier ("brave-search" is brave_search).
	s.Namespace = e.Namespace
	if s.Namespace == "" {
		s.Namespace = mcpclient.PythonName(name)
		if s.Namespace == "" {
			return nil, nil, fmt.Errorf(`the name makes no Python identifier: set "namespace"`)
		}
	}
	if err := checkNamespace(s.Namespace, e.Namespace != ""); err != nil {
		return nil, nil, err
	}

	if err := s.command(e); err != nil {
		return nil, nil, err
	}
	if err := s.transport(e); err != nil {
		return nil, nil, err
	}
	if err := s.toolLists(e); err != nil {
		return nil, nil, err
	}
	note, err := s.timeout(e)
	if err != nil {
		return nil, nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	return s, notes, nil
}

// checkKeys returns notes on the keys of an entry that Spine ignores, or an
// error for an unknown key that looks like a misspelled one of Spine's.
func checkKeys(fields map[string]json.RawMessage) ([]string, error) {
	var notes []string
	known := knownKeys()
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		switch {
		case known[key]:
		case slices.Contains(ignoredKeys, key):
			notes = append(notes, fmt.Sprintf("ignored %q", key))
		default:
			if near := nearSpineKey(key); near != "" {
				return nil, fmt.Errorf("unknown field %q; did you mean %q?", key, near)
			}
			notes = append(notes, fmt.Sprintf("ignored the unknown key %q", key))
		}
	}
	return notes, nil
}

// command sets the command: a string with "args" (the clients' form), or
// Spine's array of program and arguments; and the folder it runs in.
func (s *server) command(e entry) error {
	if len(e.Command) > 0 && string(e.Command) != "null" {
		var program string
		if err := json.Unmarshal(e.Command, &program); err == nil {
			if program == "" {
				return fmt.Errorf("command is empty")
			}
			s.Command = append([]string{program}, e.Args...)
		} else if err := json.Unmarshal(e.Command, &s.Command); err != nil {
			return fmt.Errorf("command must be a string (with args) or an array of strings")
		} else if len(s.Command) == 0 || s.Command[0] == "" {
			return fmt.Errorf("command is empty")
		} else {
			s.Command = append(s.Command, e.Args...)
		}
	} else if len(e.Args) > 0 {
		return fmt.Errorf("args without a command")
	}
	switch {
	case e.Dir != "" && e.Cwd != "" && e.Dir != e.Cwd:
		return fmt.Errorf(`both "dir" and "cwd": keep one`)
	case e.Dir != "":
		s.Dir = e.Dir
	default:
		s.Dir = e.Cwd
	}
	return nil
}

// transport sets the URL, by any of its spellings, and the transport, checks
// that they agree with the command, and expands the variables of env and
// headers.
func (s *server) transport(e entry) error {
	urls := 0
	for _, u := range []string{e.URL, e.HTTPURL, e.ServerURL} {
		if u != "" {
			urls++
			s.URL = u
		}
	}
	if urls > 1 {
		return fmt.Errorf(`more than one of "url", "httpUrl" and "serverUrl"`)
	}
	kind := e.Type
	if kind == "" {
		kind = e.TransportType
	} else if e.TransportType != "" && e.TransportType != e.Type {
		return fmt.Errorf(`"type" %q and "transportType" %q differ`, e.Type, e.TransportType)
	}
	switch kind {
	case "", "stdio", "http", "streamable-http", "streamableHttp", "streamable_http":
	case "sse":
		s.SSE = true
		if e.HTTPURL != "" {
			return fmt.Errorf(`"type" is "sse" but "httpUrl" is for streamable HTTP: use "url"`)
		}
	default:
		return fmt.Errorf(`unsupported "type" %q: Spine speaks stdio ("command"), streamable HTTP and SSE ("url")`, kind)
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("has both a command and a url")
	case len(s.Command) == 0 && s.URL == "":
		return fmt.Errorf("needs a command (stdio) or a url (streamable HTTP)")
	case kind == "stdio" && s.URL != "":
		return fmt.Errorf(`"type" is "stdio" but there is a url, no command`)
	case kind != "" && kind != "stdio" && len(s.Command) > 0:
		return fmt.Errorf(`"type" is %q but there is a command, no url`, kind)
	case len(s.Command) > 0 && len(s.Headers) > 0:
		return fmt.Errorf("headers are for a url")
	case s.URL != "" && (len(s.Env) > 0 || s.Dir != ""):
		return fmt.Errorf("env and dir are for a command")
	}
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q is not an http(s) URL", s.URL)
		}
	}
	for _, values := range []map[string]string{s.Env, s.Headers} {
		for k, v := range values {
			expanded, err := expandVars(v)
			if err != nil {
				return fmt.Errorf("%s: %v", k, err)
			}
			values[k] = expanded
		}
	}
	return nil
}

// toolLists sets which tools: an allow list or a deny list, by either of
// their names; early reads must be among them.
func (s *server) toolLists(e entry) error {
	if e.Tools != nil && e.IncludeTools != nil {
		return fmt.Errorf(`both "tools" and "includeTools": keep one`)
	}
	if e.ExcludeTools != nil && e.ExcludeAlias != nil {
		return fmt.Errorf(`both "exclude_tools" and "excludeTools": keep one`)
	}
	s.Tools, s.ExcludeTools = e.Tools, e.ExcludeTools
	if e.IncludeTools != nil {
		s.Tools = e.IncludeTools
	}
	if e.ExcludeAlias != nil {
		s.ExcludeTools = e.ExcludeAlias
	}
	if s.Tools != nil && s.ExcludeTools != nil {
		return fmt.Errorf(`both an allow list ("tools") and a deny list ("exclude_tools"): keep one`)
	}
	for _, t := range s.EarlyReads {
		if s.Tools != nil && !slices.Contains(s.Tools, t) || slices.Contains(s.ExcludeTools, t) {
			return fmt.Errorf("early_reads names %q, which the tool lists leave out", t)
		}
	}
	return nil
}

// timeout sets the timeout: Spine's is a duration string. A number is
// ignored, with a note: clients disagree on its unit (seconds in one,
// milliseconds in another).
func (s *server) timeout(e entry) (note string, err error) {
	s.Timeout = defaultTimeout
	if len(e.Timeout) > 0 && string(e.Timeout) != "null" {
		var text string
		var number float64
		switch {
		case json.Unmarshal(e.Timeout, &text) == nil:
			d, err := time.ParseDuration(text)
			if err != nil || d <= 0 {
				return "", fmt.Errorf("bad timeout %q: a duration such as \"10s\"", text)
			}
			s.Timeout = d
		case json.Unmarshal(e.Timeout, &number) == nil:
			note = fmt.Sprintf(`ignored "timeout" %v: a number's unit differs between clients; write a duration such as "10s"`, number)
		default:
			return "", fmt.Errorf("bad timeout %s: a duration such as \"10s\"", e.Timeout)
		}
	}
	return note, nil
}

// knownKeys are the JSON keys of entry.
func knownKeys() map[string]bool {
	keys := map[string]bool{}
	for _, f := range []string{"type", "transportType", "command", "args", "env", "dir", "cwd", "url", "httpUrl", "serverUrl", "headers", "disabled", "timeout", "namespace", "early_reads", "tools", "exclude_tools", "includeTools", "excludeTools"} {
		keys[f] = true
	}
	return keys
}

// nearSpineKey is the Spine key that key is probably a typo of, or "".
func nearSpineKey(key string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	k := norm(key)
	for _, want := range spineKeys {
		w := norm(want)
		if k == w || len(w) >= 5 && editDistance(k, w) <= 2 {
			return want
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // far apart; and no quadratic work on hostile keys
	}
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkNamespace checks a server's namespace: a Python identifier that no
// import of the standard library would hide. explicit says the file set it
// with "namespace" (else it is the entry's name).
func checkNamespace(ns string, explicit bool) error {
	if err := spine.ValidName(ns); err != nil || strings.Contains(ns, ".") {
		if explicit {
			return fmt.Errorf("namespace %q must be a Python identifier that is not a keyword or builtin", ns)
		}
		return fmt.Errorf("the name %q cannot be the namespace of its tools (a Python identifier that is not a keyword or builtin): set \"namespace\" to another", ns)
	}
	if stdlibModules[ns] {
		return fmt.Errorf("namespace %s is the name of a Python standard module: a program's \"import %s\" would hide the server's tools; set \"namespace\" to %q", ns, ns, ns+"_mcp")
	}
	return nil
}

// expandVars replaces each ${NAME} (or ${env:NAME}, as some clients write
// it) in s with the environment variable NAME. A variable that is not set
// is an error; a "$" not followed by "{" stays as it is.
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
		if rest, ok := strings.CutPrefix(name, "env:"); ok {
			name = rest
		} else if strings.HasPrefix(name, "input:") {
			return "", fmt.Errorf("${%s} asks a client to prompt for a value, which Spine cannot: use ${NAME} with an environment variable", name)
		}
		value, ok := os.LookupEnv(name)
		if !ok || name == "" {
			return "", fmt.Errorf("environment variable %q is not set", name)
		}
		b.WriteString(s[:i])
		b.WriteString(value)
		s = s[i+end+1:]
	}
}
