package spine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// pythonKeywords are Python 3.11's hard keywords: no tool name segment may be one.
var pythonKeywords = setOf("False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield")

// pythonBuiltins are the names of Python 3.11's builtins module (as the Guest
// has them, help/exit/quit included): a tool may not shadow one.
var pythonBuiltins = setOf("ArithmeticError AssertionError AttributeError BaseException BaseExceptionGroup BlockingIOError BrokenPipeError BufferError BytesWarning ChildProcessError ConnectionAbortedError ConnectionError ConnectionRefusedError ConnectionResetError DeprecationWarning EOFError Ellipsis EncodingWarning EnvironmentError Exception ExceptionGroup False FileExistsError FileNotFoundError FloatingPointError FutureWarning GeneratorExit IOError ImportError ImportWarning IndentationError IndexError InterruptedError IsADirectoryError KeyError KeyboardInterrupt LookupError MemoryError ModuleNotFoundError NameError None NotADirectoryError NotImplemented NotImplementedError OSError OverflowError PendingDeprecationWarning PermissionError ProcessLookupError RecursionError ReferenceError ResourceWarning RuntimeError RuntimeWarning StopAsyncIteration StopIteration SyntaxError SyntaxWarning SystemError SystemExit TabError TimeoutError True TypeError UnboundLocalError UnicodeDecodeError UnicodeEncodeError UnicodeError UnicodeTranslateError UnicodeWarning UserWarning ValueError Warning ZeroDivisionError abs aiter all anext any ascii bin bool breakpoint bytearray bytes callable chr classmethod compile complex copyright credits delattr dict dir divmod enumerate eval exec exit filter float format frozenset getattr globals hasattr hash help hex id input int isinstance issubclass iter len license list locals map max memoryview min next object oct open ord pow print property quit range repr reversed round set setattr slice sorted staticmethod str sum super tuple type vars zip")

// reservedNames are globals the Guest defines for every program.
var reservedNames = setOf("inputs result")

func setOf(words string) map[string]bool {
	set := make(map[string]bool)
	for _, w := range strings.Fields(words) {
		set[w] = true
	}
	return set
}

// ValidName reports why name cannot be the Python-visible name of a tool in a
// Manifest, or nil: each dot-separated segment an ASCII identifier, not a
// Python keyword, not starting with "__"; the first segment not a Python
// builtin nor one of the program's globals (inputs, result). New refuses a
// Manifest with such a name.
func ValidName(name string) error {
	if name == "" {
		return fmt.Errorf("empty tool name")
	}
	segments := strings.Split(name, ".")
	for _, seg := range segments {
		if !isIdentifier(seg) {
			return fmt.Errorf("tool name %q: %q is not a Python identifier (ASCII letters, digits and _, not starting with a digit)", name, seg)
		}
		if pythonKeywords[seg] {
			return fmt.Errorf("tool name %q: %q is a Python keyword", name, seg)
		}
		if strings.HasPrefix(seg, "__") {
			return fmt.Errorf("tool name %q: names starting with __ are reserved for the Guest", name)
		}
	}
	first := segments[0]
	if pythonBuiltins[first] {
		return fmt.Errorf("tool name %q: %q would shadow a Python builtin", name, first)
	}
	if reservedNames[first] {
		return fmt.Errorf("tool name %q: %q is reserved for the program's globals", name, first)
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkManifest validates every entry and returns a copy of m.
func checkManifest(m Manifest) (Manifest, error) {
	copied := make(Manifest, len(m))
	for name, spec := range m {
		if err := ValidName(name); err != nil {
			return nil, fmt.Errorf("spine: %w", err)
		}
		if spec.Call == nil {
			return nil, fmt.Errorf("spine: tool %q has no Call", name)
		}
		copied[name] = spec
	}
	// A name cannot be both a tool and a namespace: "market" and "market.price".
	for name := range copied {
		for prefix := name; strings.Contains(prefix, "."); {
			prefix = prefix[:strings.LastIndex(prefix, ".")]
			if _, clash := copied[prefix]; clash {
				return nil, fmt.Errorf("spine: tool %q is also the namespace of tool %q", prefix, name)
			}
		}
	}
	return copied, nil
}

// runTools checks a run's own tools (Request.Tools) as New checks a
// Manifest, and against the Runner's: none may have a name of the Runner's,
// nor be the namespace of one of its tools or have one of them as its
// namespace. It returns a copy, and its encoding for the Guest (none for
// none).
func (r *Runner) runTools(tools Manifest) (Manifest, guestRunTools, error) {
	var none guestRunTools
	if len(tools) == 0 {
		return nil, none, nil
	}
	if len(tools) > MaxRunTools {
		return nil, none, fmt.Errorf("%w: %d tools for a run, over the limit of %d", ErrBadRequest, len(tools), MaxRunTools)
	}
	copied, err := checkManifest(tools)
	if err != nil {
		return nil, none, fmt.Errorf("%w: %v", ErrBadRequest, strings.TrimPrefix(err.Error(), "spine: "))
	}
	for name := range copied {
		if _, clash := r.manifest[name]; clash {
			return nil, none, fmt.Errorf("%w: tool %q is one of the Runner's tools", ErrBadRequest, name)
		}
		if owner := r.namespaceOf(name); owner != "" {
			return nil, none, fmt.Errorf("%w: tool %q clashes with the Runner's tool %q (a name cannot be both a tool and a namespace)", ErrBadRequest, name, owner)
		}
	}
	return copied, r.runToolCache.encode(copied), nil
}

// CheckTools reports whether tools may be a run's own (Request.Tools), as
// Run checks them: an error wrapping ErrBadRequest that names the first
// tool refused, a name of the Runner's among them. A server checks a
// request's tools with it before it answers anything of the run.
func (r *Runner) CheckTools(tools Manifest) error {
	_, _, err := r.runTools(tools)
	return err
}

// guestToolCache keeps the Guest's form of the tools runs brought
// (Request.Tools), by what it is made of: a caller sends the same tools with
// every run of an agent's loop, and writing a tool's stub costs more than a
// small run. At most maxCachedGuestTools are kept; past that it starts
// again.
//
// A run's tool under a namespace ("crm.search") that is not an early read
// goes to the Guest by name alone (guestRunTools): its proxy is made when
// the program first reaches it (crm.search), from what the Guest then asks
// the Host for (discoveryProxy). Decoding each tool's stub and schema, and
// making its proxy, as every run starts would cost a run that declares 20
// tools most of a millisecond in the Guest (docs/performance.md), though
// most runs use a few of them. A tool at the top level is a global of the
// program, and an early read's schema is needed before the program runs:
// those go whole.
type guestToolCache struct {
	mu    sync.Mutex
	tools map[[sha256.Size]byte]json.RawMessage
}

const maxCachedGuestTools = 4096

// guestRunTools is a run's own tools as the Guest takes them: whole, the
// JSON list of those it gets whole (encodeGuestTool), as extra_tools; lazy,
// {"names": [...], "spaces": [...]}, the names of those it gets by name
// alone and the namespaces that hold them, as lazy_tools. nil for none.
type guestRunTools struct {
	whole, lazy json.RawMessage
}

// encode is m as the Guest takes it: the tools it gets whole taken from the
// cache when it holds them; the names of the others, and their namespaces,
// in a list each, which the Guest takes in whole without a step per tool.
func (c *guestToolCache) encode(m Manifest) guestRunTools {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	var whole, lazy, spaces bytes.Buffer
	seen := make(map[string]bool)
	for _, name := range names {
		spec := m[name]
		if dot := strings.LastIndexByte(name, '.'); dot > 0 && !spec.AllowEarlyRead {
			// A checked name is ASCII letters, digits, _ and dots: no escapes.
			lazy.WriteString(`,"` + name + `"`)
			if space := name[:dot]; !seen[space] {
				spaces.WriteString(`,"` + space + `"`)
				seen[space] = true
			}
			continue
		}
		whole.WriteByte(',')
		whole.Write(c.tool(name, spec))
	}
	var out guestRunTools
	if whole.Len() > 0 {
		out.whole = json.RawMessage("[" + whole.String()[1:] + "]")
	}
	if lazy.Len() > 0 {
		out.lazy = json.RawMessage(`{"names":[` + lazy.String()[1:] + `],"spaces":[` + spaces.String()[1:] + `]}`)
	}
	return out
}

// tool is encodeGuestTool of name and spec, from the cache when it holds it.
func (c *guestToolCache) tool(name string, spec ToolSpec) json.RawMessage {
	key := guestToolKey(name, spec)
	c.mu.Lock()
	encoded, ok := c.tools[key]
	c.mu.Unlock()
	if !ok {
		encoded = encodeGuestTool(name, spec)
		c.mu.Lock()
		if c.tools == nil || len(c.tools) >= maxCachedGuestTools {
			c.tools = make(map[[sha256.Size]byte]json.RawMessage)
		}
		c.tools[key] = encoded
		c.mu.Unlock()
	}
	return encoded
}

// guestToolKey is a digest of everything of a tool that its Guest form is
// made of, each part length-prefixed.
func guestToolKey(name string, spec ToolSpec) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, part := range [][]byte{[]byte(name), []byte(spec.Description), spec.InputSchema, spec.OutputSchema,
		{boolByte(spec.AllowEarlyRead), boolByte(spec.KeywordOnly)}} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// MaxRunTools bounds the tools one run may bring (Request.Tools).
const MaxRunTools = 1024

// namespaceOf returns a tool of the Runner's that clashes with name as a
// namespace: one named as a prefix of name ("crm" for "crm.search"), or one
// under name ("crm.search" for "crm"); "" for none.
func (r *Runner) namespaceOf(name string) string {
	for prefix := name; strings.Contains(prefix, "."); {
		prefix = prefix[:strings.LastIndex(prefix, ".")]
		if _, clash := r.manifest[prefix]; clash {
			return prefix
		}
	}
	for tool := range r.manifest {
		if strings.HasPrefix(tool, name+".") {
			return tool
		}
	}
	return ""
}

// guestTool is one manifest entry as the Guest's execute request carries it.
type guestTool struct {
	Name  string `json:"name"`
	Early bool   `json:"early,omitempty"`
	// Sig is the def line of the tool's stub ("def lookup(key: str) ->
	// Any:"), and Doc its docstring's text: help(tool) shows the one as the
	// signature and the other as the documentation.
	Sig string `json:"sig,omitempty"`
	Doc string `json:"doc,omitempty"`
	// Params is what the tool's proxy checks of a call's arguments (from
	// InputSchema); nil: any keywords go.
	Params *keywordCheck `json:"params,omitempty"`
}

// encodeGuestTools encodes the manifest for the Guest once, in a stable order
// (Runner.guestTools sends it when a run needs it).
func encodeGuestTools(m Manifest) json.RawMessage {
	tools := make([]guestTool, 0, len(m))
	for name, spec := range m {
		tools = append(tools, newGuestTool(name, spec))
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	encoded, _ := json.Marshal(tools)
	return encoded
}

func newGuestTool(name string, spec ToolSpec) guestTool {
	sig, doc := newStubWriter([]string{name}).def(name, spec)
	return guestTool{Name: name, Early: spec.AllowEarlyRead, Sig: sig, Doc: doc, Params: checkOf(spec)}
}

// encodeGuestTool is one tool of encodeGuestTools.
func encodeGuestTool(name string, spec ToolSpec) json.RawMessage {
	encoded, _ := json.Marshal(newGuestTool(name, spec))
	return encoded
}
