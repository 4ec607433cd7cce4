package sessionstore

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
)

// Owners, as Meta.Owner keeps them and the owner index names them. What a
// replica does with a store — when it writes a session, what it may load —
// is package fleet's.

// OwnerOf is how the owner a token digest names is kept in Meta.Owner: the
// digest in hex; "" for the zero digest (no token).
func OwnerOf(digest [sha256.Size]byte) string {
	if digest == ([sha256.Size]byte{}) {
		return ""
	}
	return hex.EncodeToString(digest[:])
}

// Owner is the owner of the sessions made with token: the hex SHA-256 of
// the token, never the token; "" for no token.
func Owner(token string) string {
	if token == "" {
		return ""
	}
	return OwnerOf(sha256.Sum256([]byte(token)))
}

// OwnedBy reports whether m's session belongs to owner, in constant time.
func (m Meta) OwnedBy(owner string) bool {
	return subtle.ConstantTimeCompare([]byte(m.Owner), []byte(owner)) == 1
}
