package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/service"
)

// The Server is an http.Handler: POST /v1/run runs a program and answers
// with its value and output, or with the error of a run that failed.
func ExampleNew() {
	ctx := context.Background()
	lookup := func(ctx context.Context, args json.RawMessage) (any, error) {
		var a struct{ Key string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		if a.Key != "book" {
			return nil, fmt.Errorf("no such key: %q", a.Key)
		}
		return 21, nil
	}
	runner, err := spine.New(ctx, spine.Manifest{"lookup": {Call: lookup}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close(ctx)
	ts := httptest.NewServer(service.New(runner, &service.Options{Slots: 4}))
	defer ts.Close()

	for _, body := range []string{
		`{"source": "print('pricing')\nlookup(key='book') * inputs['quantity']", "inputs": {"quantity": 3}}`,
		`{"source": "lookup(key='unicorn')"}`,
	} {
		resp, err := http.Post(ts.URL+"/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		var answer service.Response
		err = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		if answer.Error != nil {
			fmt.Printf("%d %s: %s: %s (line %d)\n", resp.StatusCode, answer.Error.Kind, answer.Error.Type, answer.Error.Message, answer.Error.Line)
			continue
		}
		fmt.Printf("%d %s, stdout %q, %d tool call\n", resp.StatusCode, answer.Value, answer.Stdout, answer.ToolCalls)
	}
	// Output:
	// 200 63, stdout "pricing\n", 1 tool call
	// 422 python: RuntimeError: no such key: "unicorn" (line 1)
}
