package spine

// A Display is one value as a notebook shows it: its formats by MIME type, as
// in a Jupyter execute result's data. "text/plain", the value's repr (cut to
// 64 Ki characters), is always there; "text/html", "text/markdown",
// "text/latex", "image/svg+xml", "image/png" and "image/jpeg" (base64) and
// "application/json" (JSON text) when the object offers them
// (_repr_mimebundle_, _repr_html_, ...). docs/python.md has the rules.
type Display map[string]string

// Text returns the display's text/plain: what a notebook's Out[ ] shows of
// the value, and what a model is shown.
func (d Display) Text() string { return d["text/plain"] }
