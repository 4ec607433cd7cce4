package spine

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
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
		sig, doc := newStubWriter([]string{name}).def(name, spec)
		tools = append(tools, guestTool{Name: name, Early: spec.AllowEarlyRead, Sig: sig, Doc: doc, Params: checkOf(spec)})
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	encoded, _ := json.Marshal(tools)
	return encoded
}
