package service

import "time"

// SetClock makes s read the time from now: when its sessions were last
// used, and so when Options.SessionTTL has passed.
func SetClock(s *Server, now func() time.Time) {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	s.sessions.now = now
}
