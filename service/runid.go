package service

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// A run with client tools lives in the memory of the Server that started
// it, so its continuations (POST /v1/runs/{run_id}/...) must reach that
// Server. Its id says which: "run_" + Options.Replica + "." + the
// Server's incarnation (random, made by New) + "." + 32 random hex digits.
// A load balancer routes on the id's replica (docs/scaling.md: with
// HAProxy, a use-server line per replica), and a Server that gets another's
// continuation says where the run lives, or that it ended with the process
// that held it.

// maxReplicaName is the longest Options.Replica: a DNS label's.
const maxReplicaName = 63

// Kinds of a continuation that reached the wrong Server.
const (
	kindRunElsewhere = "run_elsewhere"
	kindRunLost      = "run_lost"
)

// ValidReplica reports what is wrong with name as Options.Replica, if
// anything: it must be 1 to 63 letters, digits and '-', as a DNS label
// (a Kubernetes Pod's name is one), so that it reads the same in a run id,
// a URL path and a load balancer's rule.
func ValidReplica(name string) error {
	if name == "" || len(name) > maxReplicaName {
		return fmt.Errorf("a replica name is 1 to %d characters, not %d", maxReplicaName, len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("a replica name has only letters, digits and '-': %q", name)
		}
	}
	return nil
}

// runIDs makes a Server's run ids.
type runIDs struct {
	replica     string // Options.Replica; "" for none
	incarnation string // 8 hex digits, new in every New
	prefix      string // "run_" + replica + "." + incarnation + "."
}

func newRunIDs(replica string) runIDs {
	var b [4]byte
	rand.Read(b[:])
	ids := runIDs{replica: replica, incarnation: hex.EncodeToString(b[:])}
	ids.prefix = "run_" + ids.incarnation + "."
	if replica != "" {
		ids.prefix = "run_" + replica + "." + ids.incarnation + "."
	}
	return ids
}

// next returns a new run id: unguessable, since its last 128 bits are
// random.
func (ids runIDs) next() string {
	var b [16]byte
	rand.Read(b[:])
	return ids.prefix + hex.EncodeToString(b[:])
}

// whyNot answers a continuation of id, which this Server does not hold:
// 421 run_elsewhere when another replica made it, 410 run_lost when an
// earlier process of this replica did, else 404 not_found (saying so when
// another process without a name made it: another Server, or this one
// before a restart, which cannot be told apart).
func (ids runIDs) whyNot(id string) (status int, kind, msg string) {
	replica, incarnation, ok := parseRunID(id)
	switch {
	case ok && replica != ids.replica && replica != "":
		here := "a replica without a name"
		if ids.replica != "" {
			here = "replica " + ids.replica
		}
		return http.StatusMisdirectedRequest, kindRunElsewhere, fmt.Sprintf(
			"run %s lives on replica %s, and this is %s: a run paused for its caller stays on the replica that started it, so the load balancer must route /v1/runs/%s/... there by the replica's name in the id (docs/scaling.md); if that replica has stopped, the run ended with it",
			id, replica, here, id)
	case ok && replica != "" && replica == ids.replica && incarnation != ids.incarnation:
		return http.StatusGone, kindRunLost, fmt.Sprintf(
			"run %s was started by an earlier process of this replica, which has stopped (a restart or a crash): a run paused for its caller lives in its replica's memory and ended with it; start the run again",
			id)
	case ok && incarnation != ids.incarnation: // neither has a name: which server made it is unknown
		return http.StatusNotFound, kindNotFound, fmt.Sprintf(
			"no such run here: run %s was started by another server, or by an earlier process of this one; a run paused for its caller lives in the memory of the server that started it, so behind a load balancer give each server a name (--replica) to route by (docs/scaling.md)",
			id)
	}
	return http.StatusNotFound, kindNotFound, "no such run: it was never started, has ended, or another token started it"
}

// parseRunID splits a run id into the replica ("" for none) and the
// incarnation that made it; ok is false for an id of no Server's shape.
func parseRunID(id string) (replica, incarnation string, ok bool) {
	rest, found := strings.CutPrefix(id, "run_")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	switch len(parts) {
	case 2:
		incarnation = parts[0]
	case 3:
		replica, incarnation = parts[0], parts[1]
		if ValidReplica(replica) != nil {
			return "", "", false
		}
	default:
		return "", "", false
	}
	if len(incarnation) != 8 || len(parts[len(parts)-1]) != 32 {
		return "", "", false
	}
	return replica, incarnation, true
}
