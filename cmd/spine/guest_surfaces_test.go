package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spine-run/spine/internal/spinetest"
)

// pandasProgram is a pandas program and what it prints, natively as in the
// data Guest.
const (
	pandasProgram = "import pandas as pd\ndf = pd.DataFrame({'qty': [3, 4], 'price': [2.5, 1.0]})\nprint((df.qty * df.price).sum())\nint(df.qty.sum())"
	pandasPrints  = "11.5\n"
)

// TestServeDataGuest: spine serve --guest data runs a pandas program, and a
// program on the default Guest's serve cannot import pandas.
func TestServeDataGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spine and starts the data Guest in a subprocess")
	}
	bin := buildSpine(t)
	body, _ := json.Marshal(map[string]string{"source": pandasProgram})
	_, addr := start(t, bin, "serve", "--listen", "127.0.0.1:0", "--guest", "data")
	status, a, err := postRun(t, "http://"+addr, string(body))
	if err != nil || status != 200 || string(a.Value) != "7" || a.Stdout != pandasPrints {
		t.Errorf("spine serve --guest data: %d %s %q %+v %v", status, a.Value, a.Stdout, a.Error, err)
	}
	_, addr = start(t, bin, "serve", "--listen", "127.0.0.1:0")
	if status, a, _ := postRun(t, "http://"+addr, string(body)); status == 200 || a.Error == nil || a.Error.Type != "ModuleNotFoundError" {
		t.Errorf("pandas on the default Guest: %d %+v", status, a.Error)
	}
}

// TestMCPDataGuest: spine mcp --guest data runs a pandas program for an MCP
// client.
func TestMCPDataGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds spine and starts the data Guest in a subprocess")
	}
	bin := buildSpine(t)
	cmd := exec.Command(bin, "mcp", "--guest", "data")
	cmd.Env = append(os.Environ(), "SPINE_CONFIG=")
	client := mcp.NewClient(&mcp.Implementation{Name: "spine-test", Version: "v0"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"source": pandasProgram}})
	if err != nil {
		t.Fatal(err)
	}
	if text := spinetest.Text(res); res.IsError || !strings.Contains(text, `"value":7`) || !strings.Contains(text, `"stdout":"11.5\n"`) {
		t.Errorf("spine mcp --guest data: IsError %v, %s", res.IsError, text)
	}
}

// TestGuestFlagsRefused: a --guest that is neither a Guest's name nor a
// folder, and --packages that is not a folder, are usage errors on every
// command that takes them.
func TestGuestFlagsRefused(t *testing.T) {
	for _, cmd := range []string{"serve", "mcp", "warm"} {
		for _, args := range [][]string{{"--guest", "nosuch"}, {"--packages", "/nonexistent/pkgs"}} {
			res := spineCLI(t, "", append([]string{cmd}, args...)...)
			if res.code != exitUsage || !strings.Contains(res.stderr, args[0]) {
				t.Errorf("spine %s %s: exit %d, %s", cmd, strings.Join(args, " "), res.code, res.stderr)
			}
		}
	}
}
