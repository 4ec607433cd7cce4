package mcpconfig_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"maps"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpconfig"
)

// Load the tools of the servers in spine.json, add tools of the program's
// own, and run Python that may call all of them.
func ExampleLoad() {
	ctx := context.Background()
	own := spine.Manifest{"lookup": {Call: lookup, Description: "Look up a price by key."}}
	servers, err := mcpconfig.Load(ctx, "spine.json", &mcpconfig.Options{Reserved: []string{"lookup"}})
	if errors.Is(err, mcpconfig.ErrConfig) {
		log.Fatalf("fix the file: %v", err)
	} else if err != nil {
		log.Fatalf("a server failed: %v", err)
	}
	defer servers.Close()

	manifest := servers.Manifest()
	maps.Copy(manifest, own)
	r, err := spine.New(ctx, manifest, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)
	out, err := r.Run(ctx, spine.Request{Source: `github.search_issues(query="is:open")`})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s", out.Value)
}

func lookup(ctx context.Context, args json.RawMessage) (any, error) { return 21, nil }
