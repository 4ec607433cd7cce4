package spine

import (
	"bytes"
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
//	def lookup(*, key: str) -> Any:
//	    """Look up the price of an item by key.
//
//	    Args:
//	        key: the item, e.g. "book"
//	    """
//
//	class market:
//	    @staticmethod
//	    def get_price(*, symbol: str, currency: Literal["USD", "EUR"] = "USD") -> Quote:
//	        """Return the last price of symbol."""
//
// Stub describes how a tool's schemas become a signature.
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
// has one. help(tool) inside the Guest shows this text.
//
// The signature comes from spec.InputSchema, a JSON Schema object:
// every property is a keyword-only parameter (required ones first, then the
// rest, each group in the schema's order); an optional parameter shows its
// "default", or "= None" when it has none (leave it out to get the tool's
// default). Types: string→str, integer→int, number→float, boolean→bool,
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
	taken   map[string]bool   // names a class may not take
	tool    string            // the tool whose def is being written
}

func newStubWriter(tools []string) *stubWriter {
	w := &stubWriter{byBody: make(map[string]string), taken: make(map[string]bool)}
	for name := range pythonBuiltins {
		w.taken[name] = true
	}
	for name := range pythonKeywords {
		w.taken[name] = true
	}
	for _, name := range strings.Fields("annotations Any Literal NotRequired Required TypedDict") {
		w.taken[name] = true
	}
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

// schema is the part of JSON Schema a stub uses.
type schema struct {
	Type                 json.RawMessage   `json:"type"`
	Title                string            `json:"title"`
	Description          string            `json:"description"`
	Enum                 []json.RawMessage `json:"enum"`
	Const                json.RawMessage   `json:"const"`
	Default              json.RawMessage   `json:"default"`
	Items                json.RawMessage   `json:"items"`
	AdditionalProperties json.RawMessage   `json:"additionalProperties"`
	AnyOf                []json.RawMessage `json:"anyOf"`
	OneOf                []json.RawMessage `json:"oneOf"`
	Nullable             bool              `json:"nullable"`
	Required             []string          `json:"required"`
	Properties           orderedProps      `json:"properties"`
}

type property struct {
	name   string
	schema json.RawMessage
}

// orderedProps keeps the properties of a schema in the order written.
type orderedProps []property

func (p *orderedProps) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return nil // not an object: no properties
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
		if !seen[key] {
			seen[key] = true
			*p = append(*p, property{key, value})
		}
	}
	return nil
}

func parseSchema(raw json.RawMessage) (*schema, bool) {
	var s schema
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return &s, true
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

// isObjectSchema reports whether s describes an object with named keys: it has
// properties, or its type is "object".
func isObjectSchema(s *schema) bool {
	return len(s.Properties) > 0 || strings.Trim(string(bytes.TrimSpace(s.Type)), `"`) == "object"
}

// additional reports whether an object schema takes keys beyond its
// properties: only when additionalProperties says so, true or a schema (then
// returned). Left out, it is taken as false: the stub, and the Guest's check
// of a call's keywords, follow the properties the schema names.
func additional(s *schema) (bool, *schema) {
	ap := bytes.TrimSpace(s.AdditionalProperties)
	if len(ap) == 0 || string(ap) == "false" {
		return false, nil
	}
	as, ok := parseSchema(ap)
	if !ok || string(ap) == "true" {
		return true, nil
	}
	return true, as
}

// keywordCheck is what a tool's proxy in the Guest checks of a call's
// arguments before the call, from its input schema: nil when any keywords go
// (no schema, or not an object schema). Names holds every property,
// Required those the call must give; Open, when additional properties are
// allowed, lets any other keyword by (as **kwargs does), the required ones
// still checked. Positional is the order in which arguments given
// positionally bind (the stub's signature's), or nil when KeywordOnly says
// why none may be. OmitNone are the optional parameters whose schema refuses
// null: None for one of them is the same as leaving it out, so the request
// has no such key.
type keywordCheck struct {
	Names       []string `json:"names"`
	Required    []string `json:"required"`
	Open        bool     `json:"open,omitempty"`
	Positional  []string `json:"positional"`
	KeywordOnly string   `json:"keyword_only,omitempty"`
	OmitNone    []string `json:"omit_none,omitempty"`
}

func checkOf(spec ToolSpec) *keywordCheck {
	s, list, ok := params(spec.InputSchema)
	if !ok {
		return nil
	}
	c := &keywordCheck{Names: []string{}, Required: []string{}, KeywordOnly: keywordOnlyWhy(spec)}
	c.Open, _ = additional(s)
	if c.KeywordOnly == "" {
		c.Positional = []string{}
	}
	named := make(map[string]bool)
	for _, p := range list {
		c.Names = append(c.Names, p.name)
		named[p.name] = true
		if p.required {
			c.Required = append(c.Required, p.name)
		}
		if !p.odd && c.Positional != nil {
			c.Positional = append(c.Positional, p.name)
		}
		if !p.required && !acceptsNull(p.schema, 0) {
			c.OmitNone = append(c.OmitNone, p.name)
		}
	}
	// A required key the properties do not describe is still a keyword the
	// call must give.
	for _, r := range s.Required {
		if !named[r] {
			named[r] = true
			c.Names = append(c.Names, r)
			c.Required = append(c.Required, r)
		}
	}
	return c
}

// acceptsNull reports whether a value of schema s may be null: its type says
// so, or it says nothing of types at all.
func acceptsNull(s *schema, depth int) bool {
	if s.Nullable || depth > maxTypeDepth {
		return true
	}
	if len(s.Const) > 0 {
		return string(bytes.TrimSpace(s.Const)) == "null"
	}
	if len(s.Enum) > 0 {
		for _, v := range s.Enum {
			if string(bytes.TrimSpace(v)) == "null" {
				return true
			}
		}
		return false
	}
	if members := append(append([]json.RawMessage{}, s.AnyOf...), s.OneOf...); len(members) > 0 {
		for _, m := range members {
			ms, ok := parseSchema(m)
			if !ok || acceptsNull(ms, depth+1) {
				return true
			}
		}
		return false
	}
	var types []string
	if err := json.Unmarshal(s.Type, &types); err != nil {
		var one string
		if json.Unmarshal(s.Type, &one) != nil {
			return len(s.Properties) == 0 // no type: anything goes, unless it has properties
		}
		types = []string{one}
	}
	for _, t := range types {
		if t == "null" {
			return true
		}
	}
	return len(types) == 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func mustJSON(v any) json.RawMessage {
	encoded, _ := json.Marshal(v)
	return encoded
}

// maxTypeDepth bounds the nesting a stub spells out; deeper is Any.
const maxTypeDepth = 4

// hint is what a TypedDict class made for a schema may be named after, best
// first: the schema's title, else base.
type hint struct {
	base string
	own  bool // the class is the value of one tool, never shared with another
}

// propertyHint names the class of the property prop's schema: prop itself,
// and, for the items of an array, its singular.
func propertyHint(prop string) hint { return hint{base: camel(prop)} }

// typeOf is the Python type of a schema; h names the class an object schema
// becomes.
func (w *stubWriter) typeOf(s *schema, depth int, h hint) string {
	if depth > maxTypeDepth {
		return "Any"
	}
	var t string
	switch {
	case len(s.Const) > 0:
		t = literal([]json.RawMessage{s.Const})
	case len(s.Enum) > 0:
		t = literal(s.Enum)
	case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
		var members []string
		for _, sub := range append(append([]json.RawMessage{}, s.AnyOf...), s.OneOf...) {
			ss, ok := parseSchema(sub)
			if !ok {
				ss = &schema{}
			}
			members = append(members, w.typeOf(ss, depth+1, h))
		}
		t = union(members...)
	default:
		var types []string
		if err := json.Unmarshal(s.Type, &types); err != nil {
			var one string
			if json.Unmarshal(s.Type, &one) == nil {
				types = []string{one}
			}
		}
		if len(types) == 0 && len(s.Properties) > 0 {
			types = []string{"object"}
		}
		var members []string
		for _, name := range types {
			members = append(members, w.simpleType(s, name, depth, h))
		}
		if len(members) == 0 {
			members = []string{"Any"}
		}
		t = union(members...)
	}
	if s.Nullable {
		t = union(t, "None")
	}
	return t
}

func (w *stubWriter) simpleType(s *schema, name string, depth int, h hint) string {
	switch name {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "null":
		return "None"
	case "array":
		item := "Any"
		if is, ok := parseSchema(s.Items); ok {
			item = w.typeOf(is, depth+1, hint{base: singular(h.base)})
		}
		return "list[" + item + "]"
	case "object":
		if len(s.Properties) > 0 && depth < maxTypeDepth {
			return w.class(s, depth, h)
		}
		value := "Any"
		if as, ok := parseSchema(s.AdditionalProperties); ok && len(s.Properties) == 0 {
			value = w.typeOf(as, depth+1, hint{base: h.base + "Value"})
		}
		return "dict[str, " + value + "]"
	}
	return "Any"
}

// class returns the name of the TypedDict class of the object schema s,
// writing the class the first time one with its fields is needed.
func (w *stubWriter) class(s *schema, depth int, h hint) string {
	required := make(map[string]bool)
	for _, r := range s.Required {
		required[r] = true
	}
	// Keys that are not identifiers need TypedDict("Name", {...}); so do
	// keys starting with "__", which a class body would mangle.
	functional := false
	for _, prop := range s.Properties {
		if !isIdentifier(prop.name) || pythonKeywords[prop.name] || strings.HasPrefix(prop.name, "__") {
			functional = true
		}
	}
	total := len(s.Required) > 0
	var fields []string
	for _, prop := range s.Properties {
		ps, _ := parseSchema(prop.schema)
		if ps == nil {
			ps = &schema{}
		}
		typ := w.typeOf(ps, depth+1, propertyHint(prop.name))
		if total && !required[prop.name] {
			typ = "NotRequired[" + typ + "]"
		}
		key := prop.name
		if functional {
			key = pyLiteral(mustJSON(prop.name))
		}
		field := key + ": " + typ
		if functional {
			field += ","
		}
		comment := oneLine(ps.Description)
		if len(ps.Default) > 0 {
			if comment == "" {
				comment = "default: " + pyLiteral(ps.Default)
			} else {
				comment += " (default: " + pyLiteral(ps.Default) + ")"
			}
		}
		if comment != "" {
			field += "  # " + comment
		}
		fields = append(fields, field)
	}
	doc := strings.TrimSpace(strings.ReplaceAll(s.Description, "\r\n", "\n"))
	// Schemas that make the same class are one class, wherever they are used
	// (a server's input and output schemas differ in details a stub does not show).
	key := fmt.Sprint(functional, total, doc, fields)
	if h.own {
		key = h.base + " " + key
	}
	if name, ok := w.byBody[key]; ok {
		return name
	}
	name := w.className(s, h)
	w.byBody[key] = name
	w.taken[name] = true
	var b strings.Builder
	if functional {
		fmt.Fprintf(&b, "%s = TypedDict(%q, {\n", name, name)
		for _, f := range fields {
			b.WriteString("    " + f + "\n")
		}
		if total {
			b.WriteString("})\n")
		} else {
			b.WriteString("}, total=False)\n")
		}
		if doc != "" {
			// The functional form has no place for a docstring.
			for _, line := range strings.Split(doc, "\n") {
				b.WriteString(strings.TrimRight("# "+line, " ") + "\n")
			}
		}
	} else {
		if total {
			fmt.Fprintf(&b, "class %s(TypedDict):\n", name)
		} else {
			fmt.Fprintf(&b, "class %s(TypedDict, total=False):\n", name)
		}
		if doc != "" {
			writeDocstring(&b, "    ", doc)
		}
		for _, f := range fields {
			b.WriteString("    " + f + "\n")
		}
	}
	w.classes = append(w.classes, b.String())
	return name
}

// className picks the name of a new class: the schema's title, or that
// with the tool's short then full name in front; else the same with h's base;
// else the last of those with a number.
func (w *stubWriter) className(s *schema, h hint) string {
	short := camel(w.tool[strings.LastIndex(w.tool, ".")+1:])
	full := camel(w.tool)
	base := h.base
	if base == "" {
		base = "Object"
	}
	var candidates []string
	for _, name := range []string{camel(s.Title), base} {
		if name != "" {
			candidates = append(candidates, name, short+name, full+name)
		}
	}
	for _, c := range candidates {
		if !w.taken[c] {
			return c
		}
	}
	last := candidates[len(candidates)-1]
	for n := 2; ; n++ {
		if c := fmt.Sprintf("%s%d", last, n); !w.taken[c] {
			return c
		}
	}
}

// camel makes s a CamelCase identifier: "entity_type", "entity-type" and
// "entityType" become EntityType; "" stays "". One starting with a digit gets
// a "T" in front.
func camel(s string) string {
	var b strings.Builder
	upper := true
	for _, c := range s {
		switch {
		case c < 128 && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'):
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			if b.Len() == 0 && '0' <= c && c <= '9' {
				b.WriteByte('T')
			}
			b.WriteRune(c)
			upper = false
		default:
			upper = true
		}
	}
	return b.String()
}

// singular names the items of an array named plural: Entities→Entity,
// Edits→Edit, Matches→Match; a name that does not end in s gets "Item".
func singular(plural string) string {
	switch {
	case plural == "":
		return "Item"
	case strings.HasSuffix(plural, "ies") && len(plural) > 3:
		return plural[:len(plural)-3] + "y"
	case strings.HasSuffix(plural, "sses"), strings.HasSuffix(plural, "shes"),
		strings.HasSuffix(plural, "ches"), strings.HasSuffix(plural, "xes"):
		return plural[:len(plural)-2]
	case strings.HasSuffix(plural, "s") && !strings.HasSuffix(plural, "ss") && len(plural) > 1:
		return plural[:len(plural)-1]
	}
	return plural + "Item"
}

// union joins types with " | ", without repeats, None last; Any absorbs all.
func union(types ...string) string {
	var out []string
	seen := make(map[string]bool)
	none := false
	for _, t := range types {
		for _, member := range splitUnion(t) {
			switch {
			case member == "Any":
				return "Any"
			case member == "None":
				none = true
			case !seen[member]:
				seen[member] = true
				out = append(out, member)
			}
		}
	}
	if none {
		out = append(out, "None")
	}
	return strings.Join(out, " | ")
}

// splitUnion splits "A | B" at its top level (not inside brackets).
func splitUnion(t string) []string {
	var parts []string
	depth, start := 0, 0
	inString := byte(0)
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case inString != 0:
			if c == '\\' {
				i++
			} else if c == inString {
				inString = 0
			}
		case c == '"' || c == '\'':
			inString = c
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == '|' && depth == 0:
			parts = append(parts, strings.TrimSpace(t[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(t[start:]))
}

// literal is Literal[...] of JSON values; a null among them is "| None".
func literal(values []json.RawMessage) string {
	var members []string
	none := false
	for _, v := range values {
		if string(bytes.TrimSpace(v)) == "null" {
			none = true
			continue
		}
		members = append(members, pyLiteral(v))
	}
	t := ""
	if len(members) > 0 {
		t = "Literal[" + strings.Join(members, ", ") + "]"
	}
	if none {
		if t == "" {
			return "None"
		}
		t += " | None"
	}
	return t
}

// pyLiteral writes a JSON value as a Python literal: JSON's string escapes are
// Python's too; true, false and null become True, False and None.
func pyLiteral(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "..."
	}
	var b strings.Builder
	writeLiteral(&b, v)
	return b.String()
}

func writeLiteral(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case json.Number:
		b.WriteString(v.String())
	case string:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
		b.WriteString(strings.TrimSuffix(buf.String(), "\n"))
	case []any:
		b.WriteString("[")
		for i, e := range v {
			if i > 0 {
				b.WriteString(", ")
			}
			writeLiteral(b, e)
		}
		b.WriteString("]")
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeLiteral(b, k)
			b.WriteString(": ")
			writeLiteral(b, v[k])
		}
		b.WriteString("}")
	}
}
