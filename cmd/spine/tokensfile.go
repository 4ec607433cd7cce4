package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/door"
)

// The tokens file of spine serve --tokens-file (docs/http.md, "Tenants"): a JSON
// object with one member, "tokens", a list of
//
//	{"name": "alice", "token": "…",
//	 "sessions": 100, "live_sessions": 8,
//	 "hibernated_memory": "256MiB", "session_dir_bytes": "2GiB",
//	 "store_bytes": "1GiB"}
//
// name and token are required; a limit left out is an even share of the
// server's (door.Tenant), but store_bytes, the bytes the token's sessions
// keep in --session-store, which is no limit when left out (the store has
// no total to share). Sizes are a number of bytes or a string of a whole
// number and a unit: B, KiB, MiB, GiB. Anything else — an unknown member, a
// bad value, a duplicate name or token, a token that is not one word of at
// least 16 characters — is refused with an error that names the entry by
// its place (and its name once that is read), never by its token.
type tokensFile struct {
	Tokens []json.RawMessage `json:"tokens"`
}

type tokenEntry struct {
	Name             string    `json:"name"`
	Token            string    `json:"token"`
	Sessions         int       `json:"sessions"`
	LiveSessions     int       `json:"live_sessions"`
	HibernatedMemory byteCount `json:"hibernated_memory"`
	SessionDirBytes  byteCount `json:"session_dir_bytes"`
	StoreBytes       byteCount `json:"store_bytes"`
}

// maxTokensFile bounds the file read, and maxTenants the entries.
const (
	maxTokensFile  = 1 << 20
	maxTenants     = 10000
	minTokenLength = 16
)

var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// readTokensFile reads and checks the tokens file at path. It warns on
// stderr when others than its owner may read it.
func readTokensFile(path string, stderr io.Writer) ([]door.Tenant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file: %w", err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(stderr, "spine serve: warning: --tokens-file %s holds secrets but others than its owner may read it (mode %v); chmod 600 it\n", path, info.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokensFile+1))
	if err != nil {
		return nil, fmt.Errorf("--tokens-file: %w", err)
	}
	if len(data) > maxTokensFile {
		return nil, fmt.Errorf("--tokens-file %s: over %d bytes", path, maxTokensFile)
	}
	tenants, err := parseTokensFile(data)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file %s: %w", path, err)
	}
	return tenants, nil
}

// parseTokensFile checks a tokens file's content and returns its tenants.
func parseTokensFile(data []byte) ([]door.Tenant, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var file tokensFile
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("not a tokens file: %s", jsonProblem(err))
	}
	if dec.More() {
		return nil, errors.New("not a tokens file: more than one JSON value")
	}
	switch {
	case len(file.Tokens) == 0:
		return nil, errors.New(`no tokens: it must be {"tokens": [{"name": ..., "token": ...}, ...]}`)
	case len(file.Tokens) > maxTenants:
		return nil, fmt.Errorf("%d tokens, over the limit of %d", len(file.Tokens), maxTenants)
	}
	names := map[string]bool{}
	tokens := map[string]string{}
	out := make([]door.Tenant, 0, len(file.Tokens))
	for i, raw := range file.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		e, err := decodeEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("%s%w", where, err)
		}
		if !tenantName.MatchString(e.Name) {
			return nil, fmt.Errorf("%s: name %q must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", where, e.Name)
		}
		where += fmt.Sprintf(" (%s)", e.Name)
		switch {
		case names[e.Name]:
			return nil, fmt.Errorf("%s: the name is used twice", where)
		case len(e.Token) < minTokenLength:
			return nil, fmt.Errorf("%s: the token is missing or shorter than %d characters", where, minTokenLength)
		case !oneWord(e.Token):
			return nil, fmt.Errorf("%s: the token holds white space or control characters: it must be one word", where)
		case tokens[e.Token] != "":
			return nil, fmt.Errorf("%s: the same token as %s", where, tokens[e.Token])
		case e.Sessions < 0 || e.LiveSessions < 0:
			return nil, fmt.Errorf("%s: sessions and live_sessions must not be negative", where)
		}
		names[e.Name] = true
		tokens[e.Token] = e.Name
		out = append(out, door.Tenant{Name: e.Name, Token: e.Token, Limits: spine.TenantLimits{
			Sessions:         e.Sessions,
			Live:             e.LiveSessions,
			HibernatedMemory: uint64(e.HibernatedMemory),
			DirBytes:         uint64(e.SessionDirBytes),
		}, StoreBytes: uint64(e.StoreBytes)})
	}
	return out, nil
}

// oneWord reports whether a token holds no white space or control
// character, as a bearer token in a header must not.
func oneWord(token string) bool {
	return !strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// decodeEntry decodes one entry of the file; its error is to follow the
// entry's place, and names the entry's name when it can be read, quoting
// nothing else.
func decodeEntry(raw json.RawMessage) (tokenEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var e tokenEntry
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return e, errors.New(": an entry must be an object")
	}
	if err := dec.Decode(&e); err != nil {
		var named struct{ Name string }
		if json.Unmarshal(raw, &named) == nil && tenantName.MatchString(named.Name) {
			return e, fmt.Errorf(" (%s): %s", named.Name, jsonProblem(err))
		}
		return e, errors.New(": " + jsonProblem(err))
	}
	return e, nil
}

// jsonProblem is a decoding error without the text it read: the file holds
// secrets, and a message quoting a value could quote a token.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("JSON syntax error at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Sprintf("%s must be a %s (at byte %d)", typ.Field, typ.Type, typ.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") // a member's name, not a value
	}
	var bc byteCountError
	if errors.As(err, &bc) {
		return bc.Error()
	}
	return "it is not valid JSON"
}

// byteCount is a size in a tokens file: a number of bytes, or a string such
// as "256MiB".
type byteCount uint64

// byteCountError is a size that is not one; it quotes nothing of the file.
type byteCountError struct{ msg string }

func (e byteCountError) Error() string { return e.msg }

var byteUnits = map[string]uint64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

// UnmarshalJSON implements json.Unmarshaler.
func (b *byteCount) UnmarshalJSON(data []byte) error {
	text := string(data)
	if s, err := strconv.Unquote(text); err == nil {
		text = s
	}
	text = strings.TrimSpace(text)
	digits := strings.TrimRightFunc(text, func(r rune) bool { return r < '0' || r > '9' })
	unit, ok := byteUnits[strings.TrimSpace(text[len(digits):])]
	n, err := strconv.ParseUint(digits, 10, 64)
	if !ok || err != nil || n > math.MaxInt64/unit {
		return byteCountError{`a size must be a whole number of bytes or a string such as "256MiB" (units B, KiB, MiB, GiB), below 8 EiB`}
	}
	*b = byteCount(n * unit)
	return nil
}

// checkShares warns on stderr when the tokens' shares (each as the server
// makes it: a limit left out is an even share, door.Shares) add up to
// more than the server's: then one token filling its share can take
// another's (with more tokens than --live-sessions, each still has one
// live session, and one token's new session can cost another's session
// that holds files open); and when a token has a store_bytes but the
// server no store.
func checkShares(who string, tenants []door.Tenant, so spine.SessionOptions, store bool, stderr io.Writer) {
	var sessions, live, hib, dir uint64
	for i, l := range door.Shares(tenants, so, 0) {
		sessions += uint64(l.Sessions)
		live += uint64(l.Live)
		hib += l.HibernatedMemory
		dir += l.DirBytes
		if t := tenants[i]; t.StoreBytes > 0 && !store {
			fmt.Fprintf(stderr, "%s: warning: token %q has a store_bytes, which only a --session-store uses\n", who, t.Name)
		}
	}
	warn := func(what, flag string, sum, total uint64) {
		if total > 0 && sum > total {
			if flag != "" {
				flag = " (" + flag + ")"
			}
			fmt.Fprintf(stderr, "%s: warning: the tokens' %s add up to %d, over the server's %d%s: a token filling its share can take another's\n", who, what, sum, total, flag)
		}
	}
	warn("sessions", "--sessions", sessions, uint64(so.Max))
	warn("live_sessions", "--live-sessions", live, uint64(so.MaxLive))
	warn("hibernated_memory", "", hib, so.HibernatedMemory)
	if so.Dir != "" {
		warn("session_dir_bytes", "--session-dir-mib", dir, so.DirBytes)
	}
}
