package spinetest

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Metrics returns the samples of GET url/metrics by name with labels, e.g.
// `spine_runs_total{outcome="ok"}`; token, if not "", is sent as a bearer
// token.
func Metrics(tb testing.TB, url, token string) map[string]float64 {
	tb.Helper()
	req, err := http.NewRequest("GET", url+"/metrics", nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s/metrics: status %d: %s", url, resp.StatusCode, text)
	}
	return ParseMetrics(tb, text)
}

// ParseMetrics returns the samples of a Prometheus text exposition by name
// with labels.
func ParseMetrics(tb testing.TB, text []byte) map[string]float64 {
	tb.Helper()
	samples := make(map[string]float64)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			tb.Fatalf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			tb.Fatalf("metrics line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return samples
}
