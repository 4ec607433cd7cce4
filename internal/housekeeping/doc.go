// Package housekeeping holds tests of the module's own shape: the limits on
// the size of its files and functions that keep it readable. It has no code.
package housekeeping
