package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/spine-run/spine"
)

// askPatterns are --ask's patterns: the tools whose calls wait for a
// person (spine.ErrAsk).
type askPatterns []string

func (a *askPatterns) String() string { return strings.Join(*a, ",") }

func (a *askPatterns) Set(v string) error {
	if v == "" {
		return fmt.Errorf("a pattern of tool names, e.g. files.*")
	}
	if _, err := path.Match(v, ""); err != nil {
		return fmt.Errorf("%q: %v", v, err)
	}
	*a = append(*a, v)
	return nil
}

func (a *askPatterns) flags(fs *flag.FlagSet) { fs.Var(a, "ask", "") }

// apply sets opts.Approve to defer the calls of the tools a matches, with
// the pattern as the reason; nothing without a pattern.
func (a askPatterns) apply(opts *spine.Options) {
	if len(a) == 0 {
		return
	}
	opts.Approve = func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		for _, p := range a {
			if ok, _ := path.Match(p, tool); ok {
				return fmt.Errorf("calls of %s wait for a person (--ask %s): %w", tool, p, spine.ErrAsk)
			}
		}
		return nil
	}
}
