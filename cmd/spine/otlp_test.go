package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
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
