package service_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestFiles: a request's files, in base64, are in the program's working
// directory; the files it leaves there come back in base64, on /v1/run and
// on a session's run; bad names are refused with 400.
func TestFiles(t *testing.T) {
	ts := newServer(t, nil)
	src := `import os
rows = open("in/data.csv").read().splitlines()
open("out.csv", "w").write("\n".join(r.upper() for r in rows))
result = sorted(os.listdir("."))`
	body := `{"source": ` + quote(src) + `, "files": [{"name": "in/data.csv", "data": "` +
		base64.StdEncoding.EncodeToString([]byte("a,b\nc,d")) + `"}]}`
	status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", body)
	if status != 200 || string(out.Value) != `["in","out.csv"]` || len(out.Files) != 1 ||
		out.Files[0].Name != "out.csv" || string(out.Files[0].Data) != "A,B\nC,D" {
		t.Fatalf("status %d, %+v", status, out)
	}
	// On the wire, data is base64.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", ts.URL+"/v1/run", strings.NewReader(`{"source": "open('x', 'w').write('hi')"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Files []map[string]string `json:"files"`
	}
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	if len(raw.Files) != 1 || raw.Files[0]["name"] != "x" || raw.Files[0]["data"] != "aGk=" {
		t.Fatalf("files on the wire: %v", raw.Files)
	}

	for _, bad := range []string{
		`[{"name": "../escape", "data": ""}]`,
		`[{"name": "/etc/passwd", "data": ""}]`,
		`[{"name": "a", "data": ""}, {"name": "a", "data": ""}]`,
		`[{"name": "a", "data": "not base64!"}]`,
	} {
		status, out, _ := post(t, t.Context(), ts.URL+"/v1/run", `{"source": "1", "files": `+bad+`}`)
		if status != 400 || out.Error == nil || out.Error.Kind != "bad_request" {
			t.Errorf("files %s: status %d, %+v", bad, status, out.Error)
		}
	}

	// A session's runs: files in and out, and each run's own.
	_, sts := newSessionServer(t, nil, nil)
	c := client{t: t, url: sts.URL}
	id := c.create()
	status, rawBody, _ := c.send("POST", "/v1/sessions/"+id+"/run", "application/json",
		[]byte(`{"source": "x = open('given').read(); open('made', 'w').write(x * 2)", "files": [{"name": "given", "data": "YWI="}]}`))
	out = c.answer(status, rawBody)
	if status != 200 || len(out.Files) != 1 || out.Files[0].Name != "made" || string(out.Files[0].Data) != "abab" {
		t.Fatalf("session run: status %d, %+v", status, out)
	}
	if v := c.mustRun(id, "import os; [x, os.listdir('.')]"); v != `["ab",[]]` {
		t.Fatalf("the session's next run: %s", v)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
