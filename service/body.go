package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"time"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/mcpclient"
)

// bodyRule is what an endpoint takes as its body's Content-Type.
type bodyRule int

const (
	// needJSON: application/json only (POST /v1/run and a session's run).
	needJSON bodyRule = iota
	// needProgram: any type but none (the body is the program whatever its
	// label) and the three a browser sends cross-origin without a
	// preflight: application/x-www-form-urlencoded, multipart/form-data and
	// text/plain (POST /v1/run/stream).
	needProgram
	// needOctets: application/octet-stream only (a snapshot to restore).
	needOctets
	// noneOrJSON: no Content-Type, or application/json (POST /v1/sessions,
	// which takes no body or {}): a form's types are refused, even empty.
	noneOrJSON
)

// problem says what is wrong with the Content-Type of r, sent to the
// endpoint named what, or returns "".
func (b bodyRule) problem(r *http.Request, what string) string {
	ct := r.Header.Get("Content-Type")
	mediaType, _, err := mime.ParseMediaType(ct)
	switch b {
	case needJSON:
		if err != nil || mediaType != "application/json" {
			return fmt.Sprintf(`%s needs "Content-Type: application/json", not %q`, what, ct)
		}
	case needProgram:
		if err != nil || corsSafelisted[mediaType] {
			return fmt.Sprintf(`%s needs a Content-Type other than %q: text/x-python, say (%s are refused: a browser sends them from any page)`,
				what, ct, "application/x-www-form-urlencoded, multipart/form-data and text/plain")
		}
	case needOctets:
		if err != nil || mediaType != "application/octet-stream" {
			return fmt.Sprintf(`%s needs "Content-Type: application/octet-stream", not %q`, what, ct)
		}
	case noneOrJSON:
		if ct != "" && (err != nil || mediaType != "application/json") {
			return fmt.Sprintf(`%s takes no Content-Type or "application/json", not %q`, what, ct)
		}
	}
	return ""
}

// accept returns h behind the media type check of rule for the endpoint
// named what: a request of another type is answered 415, unread.
func (s *Server) accept(rule bodyRule, what string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := rule.problem(r, what); msg != "" {
			dropBody(w, r)
			s.refuse(w, time.Now(), http.StatusUnsupportedMediaType, kindUnsupportedMediaType, msg)
			return
		}
		h(w, r)
	})
}

// corsSafelisted are the media types a browser sends cross-origin without
// a CORS preflight.
var corsSafelisted = map[string]bool{
	"application/x-www-form-urlencoded": true,
	"multipart/form-data":               true,
	"text/plain":                        true,
}

// runRequest is the body of POST /v1/run.
type runRequest struct {
	Source     string          `json:"source"`
	Inputs     json.RawMessage `json:"inputs"`
	TimeoutMS  int64           `json:"timeout_ms"`
	EarlyReads bool            `json:"early_reads"`
	Files      []spine.File    `json:"files"`  // data in base64
	Tools      []ClientTool    `json:"tools"`  // answered by the caller (paused.go)
	Record     bool            `json:"record"` // answer with the run's record (spine.Request.Record)

	MCPServers []mcpclient.Remote `json:"mcp_servers"` // reached for this run (mcpservers.go)
}

// dropBody makes the answer to r close the connection when r has a body the
// handler will not read: net/http would otherwise read it to its end before
// answering, and a streamed body may never end.
func dropBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
}

// decodeBody decodes r's JSON body, one value within max bytes, unknown
// fields refused, into v.
func decodeBody(w http.ResponseWriter, r *http.Request, max int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if extra := dec.Decode(&struct{}{}); extra != io.EOF {
			err = extra
			if err == nil {
				err = errors.New("more than one JSON value in the body")
			}
		}
	}
	return err
}

// bodyRefused answers a body decodeBody refused.
func (s *Server) bodyRefused(w http.ResponseWriter, start time.Time, err error) {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.refuse(w, start, http.StatusRequestEntityTooLarge, kindTooLarge, fmt.Sprintf("the request body is over the %d-byte limit", tooBig.Limit))
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.refuse(w, start, http.StatusRequestTimeout, kindReadTimeout, "the request body did not arrive within the server's read timeout")
	default:
		s.refuse(w, start, http.StatusBadRequest, kindBadRequest, "bad JSON body: "+err.Error())
	}
}
