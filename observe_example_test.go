package spine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/spine-run/spine"
)

// An approval hook refuses a call, which raises PermissionError in the
// program; Request.Stdout gets the program's output while it runs, and
// Output.Calls records every call.
func ExampleApproveFunc() {
	ctx := context.Background()
	approve := func(ctx context.Context, tool string, args json.RawMessage, early bool) error {
		var a struct{ Key string }
		json.Unmarshal(args, &a)
		if a.Key == "pen" {
			return errors.New("pens are not for sale")
		}
		return nil
	}
	r, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, &spine.Options{Approve: approve})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	out, err := r.Run(ctx, spine.Request{
		Source: `print("book:", lookup(key="book"))
try:
    lookup(key="pen")
except PermissionError as e:
    print("pen:", e)
`,
		Stdout: os.Stdout,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range out.Calls {
		fmt.Printf("%s failed=%v\n", c.Tool, c.Failed)
	}
	// Output:
	// book: 21
	// pen: pens are not for sale
	// lookup failed=false
	// lookup failed=true
}
