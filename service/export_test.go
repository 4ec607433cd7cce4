package service

import "time"

// SetKeepAlive sets how long a run's stream may say nothing, for a test;
// restore puts the default back.
func SetKeepAlive(d time.Duration) (restore func()) {
	old := keepAlive
	keepAlive = d
	return func() { keepAlive = old }
}
