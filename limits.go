package spine

// Options returns the Runner's settings as New completed them: every zero
// field of the Options given to New set to its default. It is a copy;
// changing it changes nothing. Adapters read it to tell a model the limits
// its programs run under (package codemode).
func (r *Runner) Options() Options {
	return r.opts
}

// DefaultOptions returns the settings of a Runner made with nil Options:
// every field set to its default.
func DefaultOptions() Options {
	return (*Options)(nil).withDefaults()
}
