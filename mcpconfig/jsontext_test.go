package mcpconfig_test

import "encoding/json"

// jsonText is v as JSON, as the bridge hands it to Python: a structured
// result keeps the server's key order, whatever Go type holds it.
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
