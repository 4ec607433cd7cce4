package spine

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// A Tenant is a share of a Runner's sessions: the sessions one client (a
// token of spine serve, say) makes through it count against its limits as
// well as the Runner's, and when it is at one of them its own sessions make
// the room, or its request fails with ErrTooManySessions. Other tenants'
// sessions are never hibernated, lost or refused because of it. With the
// tenants' limits adding up to no more than the Runner's (SessionOptions),
// one tenant filling its share cannot take another's (docs/sessions.md,
// "Tenants").
type Tenant struct {
	r      *Runner
	name   string
	limits TenantLimits

	// Guarded by the Runner's sessions.mu.
	sessions int   // its open sessions
	live     int   // of those, with a live Guest
	frozen   int64 // bytes of its snapshots kept in memory
	disk     int64 // bytes of its snapshots in SessionOptions.Dir
}

// TenantLimits are a Tenant's share of a Runner's sessions. A zero field is
// no limit of the tenant's own: only the Runner's applies.
type TenantLimits struct {
	Sessions         int    // sessions at once, live and hibernated
	Live             int    // sessions with a live Guest
	HibernatedMemory uint64 // bytes of snapshots of its hibernated sessions kept in memory
	DirBytes         uint64 // bytes of snapshots of its hibernated sessions in SessionOptions.Dir
}

// NewTenant returns a share of the Runner's sessions named name (for errors
// and logs) with limits. Sessions made through it are the Runner's like any
// other: Runner.Close ends them.
func (r *Runner) NewTenant(name string, limits TenantLimits) *Tenant {
	return &Tenant{r: r, name: name, limits: limits}
}

// Name is the tenant's name.
func (t *Tenant) Name() string { return t.name }

// NewSession is Runner.NewSession, counted in the tenant's share.
func (t *Tenant) NewSession(ctx context.Context) (*Session, error) {
	return t.r.newSession(ctx, t)
}

// Restore is Runner.Restore, counted in the tenant's share.
func (t *Tenant) Restore(ctx context.Context, snapshot []byte) (*Session, error) {
	return t.r.restore(ctx, bytes.NewReader(snapshot), t)
}

// RestoreFrom is Runner.RestoreFrom, counted in the tenant's share.
func (t *Tenant) RestoreFrom(ctx context.Context, rd io.Reader) (*Session, error) {
	return t.r.restore(ctx, rd, t)
}

// TenantStats counts a tenant's sessions.
type TenantStats struct {
	Sessions         int   // open sessions, live and hibernated
	Live             int   // sessions with a live Guest
	HibernatedMemory int64 // bytes of snapshots kept in memory
	DirBytes         int64 // bytes of snapshots in SessionOptions.Dir
}

// Stats returns the tenant's counts.
func (t *Tenant) Stats() TenantStats {
	m := t.r.sessions
	m.mu.Lock()
	defer m.mu.Unlock()
	return TenantStats{Sessions: t.sessions, Live: t.live, HibernatedMemory: t.frozen, DirBytes: t.disk}
}

// The methods below take a nil *Tenant (a session of the Runner's own, with
// no share of its own) and are called with the Runner's sessions.mu held.

// refuseSession is why the tenant may not have one more session, or nil.
func (t *Tenant) refuseSession() error {
	if t == nil || t.limits.Sessions <= 0 || t.sessions < t.limits.Sessions {
		return nil
	}
	return fmt.Errorf("%w: tenant %q holds %d, its limit", ErrTooManySessions, t.name, t.sessions)
}

// liveFull reports whether the tenant holds as many live sessions as its
// share allows.
func (t *Tenant) liveFull() bool {
	return t != nil && t.limits.Live > 0 && t.live >= t.limits.Live
}

// addSessions counts n more sessions (n < 0: fewer).
func (t *Tenant) addSessions(n int) {
	if t != nil {
		t.sessions += n
	}
}

// addLive counts n more live sessions (n < 0: fewer).
func (t *Tenant) addLive(n int) {
	if t != nil {
		t.live += n
	}
}

// roomFrozen reports whether n more bytes of snapshots in memory fit the
// tenant's share.
func (t *Tenant) roomFrozen(n int64) bool {
	return t == nil || t.limits.HibernatedMemory == 0 || t.frozen+n <= int64(t.limits.HibernatedMemory)
}

// roomDisk reports whether n more bytes of snapshots in Dir fit the
// tenant's share.
func (t *Tenant) roomDisk(n int64) bool {
	return t == nil || t.limits.DirBytes == 0 || t.disk+n <= int64(t.limits.DirBytes)
}

// addFrozen and addDisk count n more bytes (n < 0: fewer).
func (t *Tenant) addFrozen(n int64) {
	if t != nil {
		t.frozen += n
	}
}

func (t *Tenant) addDisk(n int64) {
	if t != nil {
		t.disk += n
	}
}

// label is how errors name the tenant's share.
func (t *Tenant) label() string {
	if t == nil {
		return "the Runner"
	}
	return fmt.Sprintf("tenant %q", t.name)
}
