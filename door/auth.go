package door

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/spine-run/spine/sessionstore"
)

// RequireToken returns a handler that passes a request to next only when it
// carries the header "Authorization: Bearer <token>", and answers any other
// with 401, "WWW-Authenticate: Bearer" and the JSON of a refused run (error
// kind "unauthorized"), and closes that connection: a client without the
// token holds no keep-alive connection. It compares SHA-256 digests of the two tokens in
// constant time, so neither the token's bytes nor its length show in the
// time of an answer. token must not be empty.
//
// It is the check service.Server makes itself when its Options.Token is
// set; use it for other handlers served beside it, such as an MCP endpoint.
// The token's name, for the access log (TokenName), is "default".
func RequireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		panic("door: RequireToken with an empty token")
	}
	return NewTenants(nil, []Tenant{{Name: "default", Token: token}}, 0).Require(next)
}

// Require is RequireToken for the tenants' tokens: a request passes with
// any of them (every one compared, in constant time, Identify), and
// TokenName is then that tenant's Name. ts must have a token.
func (ts *Tenants) Require(next http.Handler) http.Handler {
	if ts.Len() == 0 {
		panic("door: Require without a token")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, share, ok := ts.Identify(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", WWWAuthenticate)
			CloseConn(w)
			WriteJSON(w, http.StatusUnauthorized, Response{
				Value: json.RawMessage("null"),
				Error: &Error{Kind: KindUnauthorized, Message: UnauthorizedMessage},
			})
			return
		}
		SetTokenName(r.Context(), share.Name)
		r.Header.Set(tokenNameHeader, share.Name) // a client's own header of that name is replaced
		next.ServeHTTP(w, r)
	})
}

// tokenNameHeader carries, from Require to the handler it guards,
// the name of the token a request was let in with.
const tokenNameHeader = "Spine-Token-Name"

// RequestToken is the name of the token Require let the request of
// headers h in with, "" when none. It reads a header, so that it reaches
// handlers that see only a request's headers (an MCP tool's call).
func RequestToken(h http.Header) string { return h.Get(tokenNameHeader) }

// The answer to a request without the token: its WWW-Authenticate header
// and its error's message (kind KindUnauthorized).
const (
	WWWAuthenticate     = `Bearer realm="spine"`
	UnauthorizedMessage = `this server needs "Authorization: Bearer <token>"`
)

// BearerDigest returns the SHA-256 digest of r's bearer token, and false
// when r has none. A session is marked with it as its owner's (Owner).
func BearerDigest(r *http.Request) ([sha256.Size]byte, bool) {
	scheme, credentials, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256([]byte(strings.TrimSpace(credentials))), true
}

// Owner is who the sessions made by requests with header h belong to: the
// SHA-256 of their bearer token in hex (sessionstore.Owner), "" for none.
// Both front doors key their sessions' owners so (package fleet's owner).
func Owner(h http.Header) string {
	scheme, credentials, ok := strings.Cut(h.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return sessionstore.Owner(strings.TrimSpace(credentials))
}

// CloseConn makes the answer close its connection.
func CloseConn(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}
