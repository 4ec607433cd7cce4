package spine

import (
	"bytes"
	"encoding/json"
	"strings"
)

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

// keywordCheck is what a tool's proxy in the Guest checks of a call's keywords
// before the call, from its input schema: nil when any keywords go (no
// schema, or not an object schema). Names holds every property, Required
// those the call must give, in the order the stub's signature lists them;
// Open, when additional properties are allowed, lets any other keyword by
// (as **kwargs does), the required ones still checked.
type keywordCheck struct {
	Names    []string `json:"names"`
	Required []string `json:"required"`
	Open     bool     `json:"open,omitempty"`
}

func checkOf(raw json.RawMessage) *keywordCheck {
	s, ok := parseSchema(raw)
	if !ok || !isObjectSchema(s) {
		return nil
	}
	c := &keywordCheck{Names: []string{}, Required: []string{}}
	c.Open, _ = additional(s)
	required := make(map[string]bool)
	for _, r := range s.Required {
		required[r] = true
	}
	named := make(map[string]bool)
	for _, prop := range s.Properties {
		c.Names = append(c.Names, prop.name)
		named[prop.name] = true
		if required[prop.name] {
			c.Required = append(c.Required, prop.name)
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

func mustJSON(v any) json.RawMessage {
	encoded, _ := json.Marshal(v)
	return encoded
}
