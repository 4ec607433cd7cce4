package main

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a receiver of OTLP over HTTP (protobuf), on loopback: it
// decodes each export with OpenTelemetry's own collector types and hands
// every span on.
type otlpReceiver struct {
	url   string
	spans chan receivedSpan
}

type receivedSpan struct {
	name, traceID, service string
	attrs                  map[string]string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newOTLPReceiverOn(t, ln)
}

// newOTLPReceiverOn is newOTLPReceiver on the listener ln.
func newOTLPReceiverOn(t *testing.T, ln net.Listener) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{url: "http://" + ln.Addr().String(), spans: make(chan receivedSpan, 1000)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces, application/x-protobuf", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		data, err := io.ReadAll(io.LimitReader(body, 16<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range export.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					attrs := map[string]string{}
					for _, kv := range s.Attributes {
						attrs[kv.Key] = kv.Value.String()
					}
					select {
					case r.spans <- receivedSpan{s.Name, hex.EncodeToString(s.TraceId), service, attrs}:
					default:
					}
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

// TestServeExportsSpansOverOTLP: spine serve, given the standard OTEL_*
// variables, exports the run's span over OTLP to a receiver on loopback,
// and its access log has a line for the same request, with the request id
// the client sent and the trace id of the span.
func TestServeExportsSpansOverOTLP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts spine serve")
	}
	recv := newOTLPReceiver(t)
	bin := buildSpine(t)
	p, addr := startEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.url,
		"OTEL_SERVICE_NAME=spine-otlp-test",
		"OTEL_BSP_SCHEDULE_DELAY=50",
	}, bin, "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/run", strings.NewReader(`{"source": "6 * 7"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "otlp-test-request-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "otlp-test-request-1" {
		t.Fatalf("POST /v1/run: %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	var run receivedSpan
	for run.name != "spine.run" {
		run = <-recv.spans
	}
	if run.service != "spine-otlp-test" {
		t.Errorf("the span's service.name is %q", run.service)
	}
	// The access log line of the request names it and its trace.
	for line := range p.lines {
		if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"request_id":"otlp-test-request-1"`) {
			for _, want := range []string{`"method":"POST"`, `"path":"/v1/run"`, `"status":200`, `"trace_id":"` + run.traceID + `"`} {
				if !strings.Contains(line, want) {
					t.Errorf("the access log line lacks %s: %s", want, line)
				}
			}
			break
		}
	}
}

// hangingCollector is a collector that accepts connections, reads what is
// sent, and never answers. accepted is closed at its first connection.
func hangingCollector(t *testing.T) (url string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(first) })
			go io.Copy(io.Discard, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), first
}

// TestRunCollectorNeverAnswers: spine run whose spans go to a collector
// that accepts and never answers still ends, with its output, once the
// export was tried (the flush is bounded, flushBound); the drop is a
// warning on standard error.
func TestRunCollectorNeverAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Guest in a subprocess")
	}
	url, accepted := hangingCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3600000") // the exporter's own bound would not help
	r := spineCLI(t, "result = 6 * 7\n", "run", "-")
	r.check(t, 0, "42\n", "level=WARN", "not exported")
	<-accepted // the export was tried: the run ended while the collector held it
}

// TestServeJSONLogsEveryLine: spine serve --log-format json writes nothing
// but JSON records on standard error, its own lines (listening, shutting
// down, stopped) and OpenTelemetry's (a collector that never answers: the
// spans dropped at the bounded flush) included; and it stops.
func TestServeJSONLogsEveryLine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts spine serve")
	}
	url, accepted := hangingCollector(t)
	bin := buildSpine(t)
	p, addr := startEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + url, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_EXPORTER_OTLP_TIMEOUT=3600000"},
		bin, "serve", "--listen", "127.0.0.1:0", "--log-format", "json")
	if status, _, err := postRun(t, "http://"+addr, `{"source": "6 * 7"}`); err != nil || status != 200 {
		t.Fatalf("POST /v1/run: %d %v", status, err)
	}
	<-accepted // an export is in flight, and will never be answered
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for line := range p.lines {
		var record struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &record); err != nil || record.Level == "" || record.Msg == "" {
			t.Errorf("a line that is no JSON record: %q", line)
			continue
		}
		msgs = append(msgs, record.Level+" "+record.Msg)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("exit: %v\n%s", err, strings.Join(msgs, "\n"))
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"INFO shutting down", "INFO stopped", "WARN the spans not exported within"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q among the records:\n%s", want, all)
		}
	}
}

// TestOTLPDefaultEndpointIsHTTP: OTEL_TRACES_EXPORTER=otlp with no endpoint
// sends to http://localhost:4318, the OpenTelemetry specification's default
// for OTLP/HTTP (not https).
func TestOTLPDefaultEndpointIsHTTP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Guest in a subprocess")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:4318")
	if err != nil {
		t.Skipf("port 4318 is taken: %v", err)
	}
	recv := newOTLPReceiverOn(t, ln)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "spine-default-endpoint")
	spineCLI(t, "result = 6 * 7\n", "run", "-").check(t, 0, "42\n")
	// The flush ended before the process did: the span is here, or was
	// never sent over plain HTTP.
	for {
		select {
		case s := <-recv.spans:
			if s.name == "spine.run" && s.service == "spine-default-endpoint" {
				return
			}
		default:
			t.Fatal("no spine.run span reached http://localhost:4318/v1/traces")
		}
	}
}
