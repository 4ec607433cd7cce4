package mcpserver_test

import (
	"testing"

	"github.com/spine-run/spine/internal/spinetest"
)

// TestStoreTwoReplicasS3 is TestStoreTwoReplicas on versitygw, a real
// S3-compatible server (SPINE_FLEET_VERSITYGW; make fleet-test builds it).
func TestStoreTwoReplicasS3(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners and an S3 server")
	}
	store, ok := spinetest.S3Server(t)
	if !ok {
		t.Skip("no versitygw: set SPINE_FLEET_VERSITYGW")
	}
	twoReplicas(t, store)
}

// TestStoreRaceS3 is TestStoreRace on versitygw: S3's own create-only
// writes decide the race.
func TestStoreRaceS3(t *testing.T) {
	if testing.Short() {
		t.Skip("two Runners and an S3 server")
	}
	store, ok := spinetest.S3Server(t)
	if !ok {
		t.Skip("no versitygw: set SPINE_FLEET_VERSITYGW")
	}
	race(t, store)
}
