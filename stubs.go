package spine

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// stubImports is the first lines of Stubs' text.
const stubImports = "from __future__ import annotations\nfrom typing import Any, Literal, NotRequired, TypedDict\n"

// Stubs returns Python stub text for every tool of m, for a model's system
// prompt: valid Python that declares each tool's signature, types and
// documentation, and how to call it. The object types the tools take and
// return come first, as TypedDict classes; then the tools in name order, the
// tools of a namespace ("market.get_price") grouped as static methods of a
// class named after it, so the text shows the call as market.get_price(...):
//
//	from __future__ import annotations
//	from typing import Any, Literal, NotRequired, TypedDict
//
//	class Quote(TypedDict):
//	    price: float
//	    currency: Literal["USD", "EUR"]
//	    venue: NotRequired[str]  # where it traded
//
//	def lookup(key: str) -> Any:
//	    """Look up the price of an item by key.
//
//	    Args:
//	        key: the item, e.g. "book"
//	    """
//
//	class market:
//	    @staticmethod
//	    def get_price(symbol: str, currency: Literal["USD", "EUR"] = "USD") -> Quote:
//	        """Return the last price of symbol."""
//
// Stub says how a tool's schemas become its signature and types.
func Stubs(m Manifest) string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	w := newStubWriter(names)
	var defs strings.Builder
	// open holds the namespaces (classes) the previous tool was written in.
	var open []string
	for _, name := range names {
		parts := strings.Split(name, ".")
		space := parts[:len(parts)-1]
		common := 0
		for common < len(open) && common < len(space) && open[common] == space[common] {
			common++
		}
		if common == 0 {
			defs.WriteString("\n")
		}
		for depth := common; depth < len(space); depth++ {
			if depth > 0 && depth == common {
				defs.WriteString("\n") // after the open class's previous member
			}
			fmt.Fprintf(&defs, "%sclass %s:\n", indentOf(depth), space[depth])
		}
		if common > 0 && common == len(space) {
			defs.WriteString("\n")
		}
		w.writeDef(&defs, name, m[name], len(space))
		open = space
	}
	var b strings.Builder
	b.WriteString(stubImports)
	for _, class := range w.classes {
		b.WriteString("\n" + class)
	}
	b.WriteString(defs.String())
	return b.String()
}

// Stub returns the Python stub of one tool, as Stubs writes it, preceded by
// the TypedDict classes it uses: the tool's description is the docstring,
// followed by an "Args:" section with the description of each parameter that
// has one. help(tool) inside the Guest shows the def line and the docstring.
//
// The signature comes from spec.InputSchema, a JSON Schema object:
// every property is a parameter (required ones first, then the rest, each
// group in the schema's order), which a call may pass positionally in that
// order or by keyword; with spec.KeywordOnly, "*," comes first. An optional
// parameter shows its "default", or "= None" when it has none (leave it out,
// or pass None, to get the tool's default). Types: string→str, integer→int, number→float, boolean→bool,
// null→None, array→list[item type]; an object with properties→a TypedDict
// class (its required keys plain, the others NotRequired, or total=False when
// none is required; descriptions and defaults as comments), an object without
// properties→dict[str, value type]; enum and const→Literal[...]; a list of
// types, anyOf or oneOf→X | Y, and a nullable schema→X | None; anything
// else→Any. A class is named after the schema's title, else after the
// property that holds it (singular for the items of an array: "entities"
// holds Entity), else after the tool ("read_graph" returns ReadGraphResult);
// a name already taken by a different schema gets the tool's name in front
// (EditFileEdit), then a number; one schema used in several places is one
// class. A property whose name is not a Python identifier cannot be a keyword
// parameter: the signature gets **kwargs and the docstring lists it. Without
// a schema, or with one that is not of an object, the signature is
// (**kwargs); {"type": "object"} alone is (). The return type comes from
// spec.OutputSchema in the same way, Any without one. A dotted name is
// written as a class per namespace with the tool as a static method.
func Stub(name string, spec ToolSpec) string {
	w := newStubWriter([]string{name})
	var def strings.Builder
	parts := strings.Split(name, ".")
	for depth, space := range parts[:len(parts)-1] {
		fmt.Fprintf(&def, "%sclass %s:\n", indentOf(depth), space)
	}
	w.writeDef(&def, name, spec, len(parts)-1)
	if len(w.classes) == 0 {
		return def.String()
	}
	return strings.Join(w.classes, "\n") + "\n" + def.String()
}

func indentOf(depth int) string { return strings.Repeat("    ", depth) }

// stubWriter writes the defs of tools and collects the TypedDict classes
// their schemas need, named so that no two collide.
type stubWriter struct {
	classes []string          // the text of each class, each before the classes that use it
	byBody  map[string]string // a class's fields and doc -> its name
	taken   map[string]bool   // names a class may not take, besides reservedClassNames
	tool    string            // the tool whose def is being written
}

// stubTypingNames are the names the stubs import from typing.
var stubTypingNames = setOf("annotations Any Literal NotRequired Required TypedDict")

// classNameTaken reports whether a class of the stubs may not be named name:
// a Python builtin or keyword, a name imported from typing, or one w took.
func (w *stubWriter) classNameTaken(name string) bool {
	return pythonBuiltins[name] || pythonKeywords[name] || stubTypingNames[name] || w.taken[name]
}

func newStubWriter(tools []string) *stubWriter {
	w := &stubWriter{byBody: make(map[string]string), taken: make(map[string]bool)}
	for _, tool := range tools {
		w.taken[strings.Split(tool, ".")[0]] = true
	}
	return w
}

// writeDef writes the def of the tool name at the given depth: inside depth
// classes, as a static method.
func (w *stubWriter) writeDef(b *strings.Builder, name string, spec ToolSpec, depth int) {
	line, doc := w.def(name, spec)
	in := indentOf(depth)
	if depth > 0 {
		b.WriteString(in + "@staticmethod\n")
	}
	b.WriteString(in + line + "\n")
	body := in + "    "
	if doc == "" {
		b.WriteString(body + "...\n")
		return
	}
	writeDocstring(b, body, doc)
}

// def returns the def line of the tool name ("def f(x: int) -> Any:") and
// its docstring's text: the description, then the "Args:" section.
func (w *stubWriter) def(name string, spec ToolSpec) (line, doc string) {
	w.tool = name
	short := name[strings.LastIndex(name, ".")+1:]
	params, docs := w.signature(spec)
	returns := "Any"
	if s, ok := parseSchema(spec.OutputSchema); ok {
		returns = w.typeOf(s, 0, hint{base: camel(short) + "Result", own: true})
	}
	line = fmt.Sprintf("def %s(%s) -> %s:", short, params, returns)
	doc = strings.TrimSpace(strings.ReplaceAll(spec.Description, "\r\n", "\n"))
	if len(docs) > 0 {
		if doc != "" {
			doc += "\n\n"
		}
		doc += "Args:\n"
		for _, d := range docs {
			doc += "    " + d + "\n"
		}
	}
	return line, doc
}

// writeDocstring writes doc as a docstring at the indent body.
func writeDocstring(b *strings.Builder, body, doc string) {
	lines := strings.Split(strings.TrimRight(pyDocEscape(doc), "\n"), "\n")
	if len(lines) == 1 {
		line := lines[0]
		if strings.HasSuffix(line, `"`) {
			line = line[:len(line)-1] + `\"` // not part of the closing quotes
		}
		b.WriteString(body + `"""` + line + `"""` + "\n")
		return
	}
	b.WriteString(body + `"""`)
	for i, line := range lines {
		line = strings.TrimRight(line, " \t")
		if i > 0 && line != "" {
			b.WriteString(body)
		}
		b.WriteString(line + "\n")
	}
	b.WriteString(body + `"""` + "\n")
}

// pyDocEscape makes text safe inside a """ docstring.
func pyDocEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return strings.ReplaceAll(s, `"""`, `\"\"\"`)
}

// param is one parameter of a tool, as its input schema gives it.
type param struct {
	name     string
	schema   *schema
	required bool
	odd      bool // not a Python identifier (or a keyword): passed only as **{name: ...}
}

// params returns the parameters of a tool with input schema raw in the
// order of its stub's signature: the required ones first, then the rest,
// each group in the schema's order; ok is false when raw is no schema of an
// object (any keywords go).
func params(raw json.RawMessage) (s *schema, list []param, ok bool) {
	s, ok = parseSchema(raw)
	if !ok || !isObjectSchema(s) {
		return nil, nil, false
	}
	required := make(map[string]bool)
	for _, r := range s.Required {
		required[r] = true
	}
	var rest []param
	for _, prop := range s.Properties {
		ps, _ := parseSchema(prop.schema)
		if ps == nil {
			ps = &schema{}
		}
		p := param{name: prop.name, schema: ps, required: required[prop.name],
			odd: !isIdentifier(prop.name) || pythonKeywords[prop.name]}
		if p.required {
			list = append(list, p)
		} else {
			rest = append(rest, p)
		}
	}
	return s, append(list, rest...), true
}

// keywordOnlyWhy says why a call of spec may not pass arguments
// positionally, or "" when it may: its parameters then bind in the order of
// its stub's signature.
func keywordOnlyWhy(spec ToolSpec) string {
	if spec.KeywordOnly {
		return "the order of its parameters is not known"
	}
	if _, _, ok := params(spec.InputSchema); !ok {
		return "it has no input schema to give its parameters an order"
	}
	return ""
}

// signature returns the parameter list of spec's tool, and the "name:
// description" lines of its docstring.
func (w *stubWriter) signature(spec ToolSpec) (string, []string) {
	s, ps, ok := params(spec.InputSchema)
	if !ok {
		return "**kwargs", nil // no schema, or not one of an object
	}
	var named, docs, odd []string
	for _, p := range ps {
		typ := w.typeOf(p.schema, 0, propertyHint(p.name))
		var text string
		switch {
		case p.required:
			text = fmt.Sprintf("%s: %s", p.name, typ)
		case len(p.schema.Default) > 0:
			text = fmt.Sprintf("%s: %s = %s", p.name, typ, pyLiteral(p.schema.Default))
		default:
			text = fmt.Sprintf("%s: %s = None", p.name, union(typ, "None"))
		}
		desc := oneLine(p.schema.Description)
		if p.odd {
			note := fmt.Sprintf("%s (%s", pyLiteral(mustJSON(p.name)), typ)
			if !p.required {
				note += ", optional"
			}
			note += "): pass it as **{" + pyLiteral(mustJSON(p.name)) + ": ...}"
			if desc != "" {
				note += "; " + desc
			}
			odd = append(odd, note)
			continue
		}
		if desc != "" {
			docs = append(docs, p.name+": "+desc)
		}
		named = append(named, text)
	}
	docs = append(docs, odd...)
	extra := ""
	if len(odd) > 0 {
		extra = "**kwargs: Any"
	} else if open, as := additional(s); open {
		if as != nil {
			extra = "**kwargs: " + w.typeOf(as, 0, hint{base: "Extra"})
		} else {
			extra = "**kwargs: Any"
		}
	}
	if len(named) == 0 {
		return extra, docs
	}
	list := strings.Join(named, ", ")
	if spec.KeywordOnly {
		list = "*, " + list
	}
	if extra != "" {
		list += ", " + extra
	}
	return list, docs
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
