package spine

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Tool discovery: a program with many tools finds the one it needs instead
// of a model reading every stub up front. The Guest's builtin tools has two
// methods, answered here on the Host from the run's tools (the Runner's and
// Request.Tools) and never by a tool of the manifest:
//
//	tools.search(query="", limit=10)  [{"name", "description"}, ...] best first
//	tools.describe(name)              the tool's stub, as Stub writes it
//
// They reach the Host as calls of the names below, which no tool can have
// (a segment starting with "__" is refused by ValidName). They are not tool
// calls of the program: they are not in Output.Calls nor counted in
// MaxToolCalls, nor shown to Approve; MaxDiscoveryCalls bounds them instead.
//
// A third, discoveryProxy, is the Guest's own: it asks for a run's tool whose
// proxy it makes when the program first reaches it, given only the tool's
// name as the run started (guestRunTools): {"name", "sig", "doc", "params"}
// as the execute request would have carried it. It answers only for the
// run's own tools, and is not counted with the program's calls either.
const (
	discoverySearch   = "__tools__.search"
	discoveryDescribe = "__tools__.describe"
	discoveryProxy    = "__tools__.proxy"

	// MaxDiscoveryCalls is how many tools.search and tools.describe calls a
	// run may make.
	MaxDiscoveryCalls = 1024

	// maxSearchResults caps a search's limit.
	maxSearchResults = 100
)

// isDiscovery reports whether tool is one of the names the Host answers
// for the Guest's builtin tools.
func isDiscovery(tool string) bool {
	return tool == discoverySearch || tool == discoveryDescribe || tool == discoveryProxy
}

// discover answers a call of tools.search or tools.describe for the run, or
// the Guest's discoveryProxy.
func (st *runState) discover(request callRequest) []byte {
	if request.Tool == discoveryProxy {
		return st.proxySpec(request)
	}
	if st.discoveries >= MaxDiscoveryCalls {
		return encodeResponse(nil, fmt.Errorf("tools.search and tools.describe: the run's %d calls are used up", MaxDiscoveryCalls))
	}
	st.discoveries++
	var args struct {
		Query *string `json:"query"`
		Limit *int    `json:"limit"`
		Name  *string `json:"name"`
	}
	if err := json.Unmarshal(request.Args, &args); err != nil {
		return encodeResponse(nil, fmt.Errorf("bad arguments: %v", err))
	}
	if request.Tool == discoveryDescribe {
		if args.Name == nil {
			return encodeResponse(nil, fmt.Errorf("tools.describe needs the name of a tool"))
		}
		spec, ok := st.tool(*args.Name)
		if !ok || isDiscovery(*args.Name) {
			return encodeResponse(nil, fmt.Errorf("no tool is named %q: tools.search() lists them", *args.Name))
		}
		return encodeResponse(Stub(*args.Name, spec), nil)
	}
	query, limit := "", 10
	if args.Query != nil {
		query = *args.Query
	}
	if args.Limit != nil {
		limit = *args.Limit
	}
	if limit < 1 {
		return encodeResponse(nil, fmt.Errorf("tools.search: limit must be at least 1"))
	}
	return encodeResponse(searchTools(st.runner.manifest, st.tools, query, min(limit, maxSearchResults)), nil)
}

// proxySpec answers the Guest's discoveryProxy: the Guest's form of one of
// the run's own tools (Request.Tools), which the Guest was given by name
// only. A name that is not one of them is an error.
func (st *runState) proxySpec(request callRequest) []byte {
	var args struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(request.Args, &args); err != nil {
		return encodeResponse(nil, fmt.Errorf("bad arguments: %v", err))
	}
	spec, ok := st.tools[args.Name]
	if !ok {
		return encodeResponse(nil, fmt.Errorf("no tool of the run is named %q", args.Name))
	}
	return encodeResponse(st.runner.runToolCache.tool(args.Name, spec), nil)
}

// foundTool is one result of tools.search.
type foundTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// searchTools returns the tools of the manifests that match query, best
// first, at most limit: each word of the query (case folded) found in a
// tool's name counts three, in its description one; a tool that has none of
// them is left out. An empty query lists every tool by name.
func searchTools(a, b Manifest, query string, limit int) []foundTool {
	words := strings.Fields(strings.ToLower(query))
	type scored struct {
		foundTool
		score int
	}
	var found []scored
	for _, m := range []Manifest{a, b} {
		for name, spec := range m {
			score := 0
			lowerName, lowerDesc := strings.ToLower(name), strings.ToLower(spec.Description)
			for _, w := range words {
				if strings.Contains(lowerName, w) {
					score += 3
				}
				if strings.Contains(lowerDesc, w) {
					score++
				}
			}
			if len(words) > 0 && score == 0 {
				continue
			}
			found = append(found, scored{foundTool{Name: name, Description: firstLine(spec.Description)}, score})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].score != found[j].score {
			return found[i].score > found[j].score
		}
		return found[i].Name < found[j].Name
	})
	out := make([]foundTool, 0, min(limit, len(found)))
	for i := 0; i < len(found) && i < limit; i++ {
		out = append(out, found[i].foundTool)
	}
	return out
}

// firstLine is a description's first line, at most 200 bytes (cut at a
// rune, with an ellipsis).
func firstLine(description string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(description), "\n")
	line = strings.TrimSpace(line)
	if len(line) <= 200 {
		return line
	}
	cut := 197
	for cut > 0 && !utf8RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + "..."
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
