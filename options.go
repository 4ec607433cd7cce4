package spine

import (
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"runtime"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Options holds the Runner-wide settings. The zero value, and a nil *Options,
// mean the defaults; a zero field means that field's default.
//
// Spine takes an options struct rather than functional options: every setting
// is visible in one place, and New copies it, so changing the struct afterwards
// has no effect on the Runner.
type Options struct {
	// MemoryLimit caps each Guest's linear memory, in bytes (rounded down to
	// 64 KiB pages). Default 256 MiB; at most 512 MiB, the Guest's own maximum.
	MemoryLimit uint64

	// MaxToolCalls is how many tool calls one run may make. Default 1024.
	// Past it a call raises RuntimeError("tool call budget exhausted").
	MaxToolCalls int

	// MaxSource, MaxInputs and MaxResult cap the program's source, its encoded
	// inputs and its encoded result, in bytes. Default 1 MiB each.
	MaxSource int
	MaxInputs int
	MaxResult int

	// MaxOutput caps the captured stdout and, separately, stderr of one run,
	// in bytes. Output past it is dropped and the Output marked truncated.
	// Default 1 MiB.
	MaxOutput int

	// MaxRecord caps a run's Record (Request.Record), in bytes as encoded,
	// before compression: past it the record stops, says so (Incomplete),
	// and cannot be replayed; the run goes on. Default 16 MiB.
	MaxRecord int

	// MaxPendingEarlyReads caps the early reads a run has started and not yet
	// claimed; past it, prepare answers 0 and the call is made normally later.
	// Default 64.
	MaxPendingEarlyReads int

	// MaxEarlyReads caps the early reads one run may start in all. Early reads
	// the program never claims do not count against MaxToolCalls; this is their
	// own budget. Default 1024.
	MaxEarlyReads int

	// MaxDescriptors caps the files and directories one run may hold open
	// at once, beyond the descriptors every Guest has (stdin, stdout, stderr
	// and the standard library's folder). Past it, opening one more fails
	// in Python with OSError(EMFILE). Default 64.
	MaxDescriptors int

	// ScratchSize caps a run's scratch file system (its working directory
	// and /tmp, in the Host's memory): the bytes its files hold plus 256
	// bytes for each file and folder. Past it a write fails in Python with
	// OSError(ENOSPC). Default 64 MiB.
	ScratchSize int64

	// MaxScratchEntries caps the files and folders of a run's scratch file
	// system; past it creating one more fails with OSError(ENOSPC). Default
	// 4096.
	MaxScratchEntries int

	// MaxFiles caps the files a Request places in the working directory
	// (Request.Files), and the files an Output returns (Output.Files).
	// Default 256.
	MaxFiles int

	// MaxFileBytes caps the bytes of a Request's files, all together, and
	// of an Output's. Default 8 MiB.
	MaxFileBytes int

	// CacheDir is where the compiled Guest and the prepared images are
	// cached on disk. Default: a "spine" folder under os.UserCacheDir
	// ($XDG_CACHE_HOME, else ~/.cache, on Linux). Ignored when NoDiskCache
	// is set. A folder that cannot be made or written is not an error: New
	// then caches in memory only, and says so once to SetupLogger.
	CacheDir string

	// SeedCacheDir, when set, is a cache folder filled ahead of time (spine
	// warm), possibly read-only: New first links into CacheDir each file
	// of it that CacheDir lacks (a symbolic link; a copy where none can be
	// made), so a new process (a container's replica) loads the compiled
	// Guest instead of compiling it. The seed must stay where it is while
	// the cache is used.
	SeedCacheDir string

	// NoDiskCache keeps compiled code in memory only.
	NoDiskCache bool

	// Artifact replaces the embedded Guest (for a custom build). Default nil:
	// the Guest embedded in package guest.
	Artifact *Artifact

	// Packages, when set, is a tree of the program's own pure-Python
	// packages and modules, as they would sit in site-packages (e.g. unpacked
	// wheels: the folder that holds mypkg/__init__.py). New reads it whole
	// (at most 256 MiB in 100,000 files) into an archive on the Guest's
	// sys.path after the standard library. A tree holding a compiled
	// extension module (.so, .pyd, .dylib or .wasm files) is refused with an
	// error naming them: the Guest cannot load one. A symbolic link is
	// followed only to a file inside the tree; one that leaves it, and
	// devices, named pipes and sockets, are refused. docs/packages.md.
	Packages fs.FS

	// Preload names modules the prepared image imports (dotted names, from
	// Packages, the Guest's packages or the standard library), so runs do
	// not pay their import. A module that fails to import fails New.
	Preload []string

	// Timeout, when positive, bounds every run on top of its ctx and its
	// Request.Timeout.
	Timeout time.Duration

	// PoolSize is how many Guests the Runner keeps started and waiting for
	// runs. Default runtime.GOMAXPROCS(0); negative means no pool (each run
	// makes its own instance from the image).
	PoolSize int

	// Sessions configures the Runner's sessions (NewSession, Restore).
	Sessions SessionOptions

	// TracerProvider, when set, gets a span for every run ("spine.run") and
	// every tool call ("execute_tool <name>", a child of its run's span, in
	// the ctx the tool gets), early reads with events for their claim or
	// cancellation (docs/observability.md). Nil: no spans, and no cost.
	TracerProvider trace.TracerProvider

	// SetupLogger, when set, gets New's own lines: one before it compiles
	// the Guest when the cache holds no compiled code for it (that takes
	// seconds), one when the Runner is then ready, with the time taken
	// (both Info), and a cache folder it could not use (Warn). Default:
	// Logger.
	SetupLogger *slog.Logger

	// Logger, when set, logs the end of every run (Info), its tool calls
	// that failed or were refused (Info) and the limits it reached (Warn);
	// the start of every run at Debug. Nil: nothing is logged.
	Logger *slog.Logger

	// Approve, when set, is asked before every tool call runs, early reads
	// included, and may refuse it (ApproveFunc).
	Approve ApproveFunc
}

// SessionOptions configures sessions: their memory, how many there may be,
// and when idle ones hibernate or end (docs/sessions.md). A zero field means
// its default.
type SessionOptions struct {
	// MemoryLimit caps a session's linear memory: everything it keeps from
	// run to run plus what its current run uses. Default, and at most,
	// Options.MemoryLimit.
	MemoryLimit uint64

	// MaxLive caps the sessions whose Guest is live (in memory, ready to
	// run). A session starting or waking past it first hibernates the live
	// session used least recently that is not running. Default 64.
	MaxLive int

	// Max caps the sessions a Runner holds, live and hibernated; NewSession
	// and Restore past it fail with ErrTooManySessions. Default 10,000.
	Max int

	// Idle is how long a live session may go unused before it hibernates: its
	// state is kept as a snapshot (in memory, or in Dir) and its Guest freed
	// until its next Run. Default 1 minute; negative: never, by time.
	Idle time.Duration

	// TTL, when positive, is how long a session may go unused before it is
	// closed for good (its operations then fail with ErrSessionClosed).
	// Default 0: sessions end only when closed.
	TTL time.Duration

	// Dir, when set, is the folder hibernated sessions' snapshots go to, one
	// file each, readable by the owner only; by default they stay in memory.
	// They go into a folder of the Runner's own in it (.spine-runner-*),
	// which Close removes; New removes those of processes that ended without
	// Close (kill -9), never one a live process holds, so several processes
	// may share Dir.
	Dir string

	// HibernatedMemory caps the bytes of snapshots hibernated sessions keep
	// in memory (without Dir). A session that would take them past it stays
	// live, and a session starting or waking with no room fails with
	// ErrTooManySessions. Default 1 GiB.
	HibernatedMemory uint64

	// DirBytes caps the bytes of snapshots in Dir, as HibernatedMemory caps
	// those in memory: a session whose snapshot would take them past it
	// stays live. Default 16 GiB.
	DirBytes uint64

	// MaxSnapshot caps each snapshot a session makes, in bytes: Snapshot,
	// SnapshotTo and hibernation past it fail with ErrSnapshotTooLarge and
	// keep nothing of it (a hibernation then leaves the session live).
	// Default: the largest snapshot of a session of MemoryLimit, MemoryLimit
	// + MemoryLimit/512 + 1 MiB.
	MaxSnapshot uint64

	// OnHibernate, when set, is called each time a session hibernates, with
	// a reader of its snapshot, before the Runner goes on: a service keeping
	// sessions in a store streams it there (service.Server.Hibernated). The
	// reader streams from where the snapshot is kept (memory or Dir), so
	// reading it takes no copy of the snapshot; it is good until
	// OnHibernate returns. OnHibernate must not call the session's methods,
	// which would wait for the hibernation it is part of.
	OnHibernate func(s *Session, snapshot io.Reader)
}

// sweepEvery is how often the Runner looks for sessions to hibernate or end:
// a quarter of the shorter of Idle and TTL, within [10 ms, 10 s]; 0 when
// neither is set.
func (o SessionOptions) sweepEvery() time.Duration {
	var every time.Duration
	for _, d := range []time.Duration{o.Idle, o.TTL} {
		if d > 0 && (every == 0 || d < every) {
			every = d
		}
	}
	if every == 0 {
		return 0
	}
	return min(max(every/4, 10*time.Millisecond), 10*time.Second)
}

// Artifact is a Guest build: the wasm module and its standard library
// archive, and for a Guest with packages of its own (the data Guest, module
// github.com/spine-run/spine/guest/data) their archive and the modules its
// image imports.
type Artifact struct {
	Wasm      []byte
	StdlibZip []byte

	// PackagesZip, when set, is a zip archive of packages built for this
	// Guest, on sys.path after the standard library and before
	// Options.Packages.
	PackagesZip []byte

	// Preload names modules the prepared image imports, before
	// Options.Preload's.
	Preload []string
}

const (
	defaultMemoryLimit = 256 << 20
	guestMaxMemory     = 512 << 20 // the Guest's --max-memory
)

// withDefaults returns a copy of o (nil allowed) with every zero field set.
func (o *Options) withDefaults() Options {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = defaultMemoryLimit
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt(&opts.MaxToolCalls, 1024)
	setInt(&opts.MaxSource, 1<<20)
	setInt(&opts.MaxInputs, 1<<20)
	setInt(&opts.MaxResult, 1<<20)
	setInt(&opts.MaxOutput, 1<<20)
	setInt(&opts.MaxRecord, 16<<20)
	setInt(&opts.MaxPendingEarlyReads, 64)
	setInt(&opts.MaxEarlyReads, 1024)
	setInt(&opts.MaxDescriptors, 64)
	if opts.ScratchSize <= 0 {
		opts.ScratchSize = 64 << 20
	}
	setInt(&opts.MaxScratchEntries, 4096)
	setInt(&opts.MaxFiles, 256)
	setInt(&opts.MaxFileBytes, 8<<20)
	if opts.PoolSize == 0 {
		opts.PoolSize = runtime.GOMAXPROCS(0)
	}
	if opts.Sessions.MemoryLimit == 0 || opts.Sessions.MemoryLimit > opts.MemoryLimit {
		opts.Sessions.MemoryLimit = opts.MemoryLimit
	}
	opts.Sessions.MemoryLimit -= opts.Sessions.MemoryLimit % (64 << 10)
	setInt(&opts.Sessions.MaxLive, 64)
	setInt(&opts.Sessions.Max, 10000)
	if opts.Sessions.HibernatedMemory == 0 {
		opts.Sessions.HibernatedMemory = 1 << 30
	}
	if opts.Sessions.MaxSnapshot == 0 {
		opts.Sessions.MaxSnapshot = MaxSnapshotSize(opts.Sessions.MemoryLimit)
	}
	if opts.Sessions.DirBytes == 0 {
		opts.Sessions.DirBytes = 16 << 30
	}
	if opts.Sessions.Idle == 0 {
		opts.Sessions.Idle = time.Minute
	}
	return opts
}

// Options returns the Runner's settings as New completed them: every zero
// field of the Options given to New set to its default. It is a copy;
// changing it changes nothing. Adapters read it to tell a model the limits
// its programs run under (package codemode).
func (r *Runner) Options() Options {
	return r.opts
}

// Manifest returns the tools the Runner was made with, as New checked them.
// It is a copy; changing it changes nothing. Adapters read the tools'
// descriptions and schemas in it for their stubs (package codemode).
func (r *Runner) Manifest() Manifest {
	return maps.Clone(r.manifest)
}

// DefaultOptions returns the settings of a Runner made with nil Options:
// every field set to its default.
func DefaultOptions() Options {
	return (*Options)(nil).withDefaults()
}

// MaxSnapshotSize is the largest snapshot of a session of memory bytes: its
// changed pages, each with its number, and the format's overhead.
func MaxSnapshotSize(memory uint64) uint64 {
	return memory + memory/512 + 1<<20
}
