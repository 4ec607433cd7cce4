package mcpclient

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	var b backoff
	var got []time.Duration
	for range 12 {
		got = append(got, b.next())
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 6400 * ms, 12800 * ms, 25600 * ms, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v\nwant  %v", got, want)
		}
	}
	b.reset()
	if d := b.next(); d != 100*ms {
		t.Fatalf("after reset: %v", d)
	}
}
