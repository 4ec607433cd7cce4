package mcpclient

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// An AllowList is the hosts that remote MCP servers (Remote) may be on: the
// way out of the Host that its operator opens (spine serve --mcp-allow).
// Each entry is one of
//
//	mcp.example.com        that name, not its subdomains
//	*.example.com          any name under example.com, not example.com itself
//	192.0.2.7, [2001:db8::7], 2001:db8::7
//	                       that address (IPv6 in brackets when a port follows)
//
// optionally followed by :PORT. An entry without a port allows the URL
// scheme's default port only, 443 for https and 80 for http: a server on
// another port of an allowed host needs an entry naming that port.
//
// A URL's host is compared as written, never resolved: names compare
// without regard to case and to a trailing dot, addresses as addresses
// ([::ffff:127.0.0.1] is 127.0.0.1); 127.0.0.1 in the list does not allow
// localhost, nor the reverse. A name must look like one (letters, digits
// and hyphens in dot-separated labels, the last one starting with a
// letter), so that an address written as a name (127.1, 0x7f000001,
// 2130706433), which some resolvers read as an address, is refused rather
// than compared.
type AllowList struct {
	entries []allowEntry
}

type allowEntry struct {
	addr     netip.Addr // an address; else name
	name     string     // lower case, no trailing dot; for a wildcard, the part after "*."
	wildcard bool
	port     int // 0: the scheme's default
}

// ParseAllowList parses the entries of an AllowList (each trimmed of
// spaces; empty ones are skipped). An entry it cannot read is an error
// naming it.
func ParseAllowList(entries []string) (*AllowList, error) {
	l := &AllowList{}
	for _, raw := range entries {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		e, err := parseAllowEntry(raw)
		if err != nil {
			return nil, fmt.Errorf("entry %q: %v", raw, err)
		}
		l.entries = append(l.entries, e)
	}
	return l, nil
}

// Empty reports whether the list allows no host at all.
func (l *AllowList) Empty() bool { return l == nil || len(l.entries) == 0 }

func parseAllowEntry(raw string) (allowEntry, error) {
	host, port := raw, ""
	switch {
	case strings.HasPrefix(raw, "["):
		end := strings.Index(raw, "]")
		if end < 0 {
			return allowEntry{}, fmt.Errorf("no closing ]")
		}
		host, port = raw[1:end], raw[end+1:]
		if port != "" {
			if port[0] != ':' {
				return allowEntry{}, fmt.Errorf("only :PORT may follow ]")
			}
			port = port[1:]
		}
		if _, err := netip.ParseAddr(host); err != nil || strings.Contains(host, ".") && !strings.Contains(host, ":") {
			return allowEntry{}, fmt.Errorf("brackets are for an IPv6 address")
		}
	case strings.Count(raw, ":") == 1:
		host, port, _ = strings.Cut(raw, ":")
	}
	e := allowEntry{}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return allowEntry{}, fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
		e.port = n
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		name, err := hostName(rest)
		if err != nil {
			return allowEntry{}, err
		}
		e.name, e.wildcard = name, true
		return e, nil
	}
	addr, name, err := parseHost(host)
	if err != nil {
		return allowEntry{}, err
	}
	if addr.IsValid() && (addr.IsUnspecified() || addr.IsMulticast()) {
		return allowEntry{}, fmt.Errorf("%s is not the address of a host", addr)
	}
	e.addr, e.name = addr, name
	return e, nil
}

// parseHost reads a host as a URL holds it (brackets taken off): an
// address, or a name in lower case without a trailing dot.
func parseHost(host string) (netip.Addr, string, error) {
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return netip.Addr{}, "", fmt.Errorf("an address with a zone (%s) is not taken", host)
		}
		return addr.Unmap(), "", nil
	}
	name, err := hostName(host)
	return netip.Addr{}, name, err
}

// hostName checks that name is a DNS name (see AllowList) and returns it
// in lower case without a trailing dot.
func hostName(name string) (string, error) {
	for _, c := range []byte(name) { // ASCII before lowering: ToLower maps the Kelvin sign to k
		if c >= 0x80 {
			return "", fmt.Errorf("%q is not a host name (an international name goes in its xn-- form)", name)
		}
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%q is not a host name", name)
	}
	labels := strings.Split(name, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("%q is not a host name", name)
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return "", fmt.Errorf("%q is not a host name (letters, digits and hyphens; an international name in its xn-- form)", name)
			}
		}
	}
	if last := labels[len(labels)-1]; last[0] < 'a' || last[0] > 'z' {
		return "", fmt.Errorf("%q is neither a host name nor an IP address as usually written", name)
	}
	return name, nil
}

// defaultPort is the port of a URL scheme Spine takes, 0 for another.
func defaultPort(scheme string) int {
	switch scheme {
	case "https":
		return 443
	case "http":
		return 80
	}
	return 0
}

// check says why u may not be reached, or returns nil: its scheme, its
// user information (credentials go in headers, which stay out of logs),
// its host and its port.
func (l *AllowList) check(u *url.URL) error {
	def := defaultPort(u.Scheme)
	switch {
	case l.Empty():
		return fmt.Errorf("this server allows no MCP server: its operator's allow list is empty")
	case def == 0:
		return fmt.Errorf("the URL's scheme is %q: an MCP server is reached over http or https", u.Scheme)
	case u.User != nil:
		return fmt.Errorf("the URL holds user information: send credentials in headers")
	case u.Host == "":
		return fmt.Errorf("the URL has no host")
	}
	port := def
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
		port = n
	}
	addr, name, err := parseHost(u.Hostname())
	if err != nil {
		return err
	}
	for _, e := range l.entries {
		if e.matches(addr, name, port, def) {
			return nil
		}
	}
	where := u.Hostname()
	if strings.Contains(where, ":") {
		where = "[" + where + "]"
	}
	return fmt.Errorf("%s:%d is not a host this server allows mcp_servers on (its operator's allow list)", where, port)
}

func (e allowEntry) matches(addr netip.Addr, name string, port, def int) bool {
	if want := e.port; want != port && (want != 0 || port != def) {
		return false
	}
	switch {
	case e.addr.IsValid():
		return addr == e.addr
	case e.wildcard:
		return name != "" && strings.HasSuffix(name, "."+e.name)
	}
	return name != "" && name == e.name
}
