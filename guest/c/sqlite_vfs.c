/*
 * SQLite's operating-system layer for the Guest.
 *
 * SQLite's own Unix layer needs what WASI lacks (fcntl record locks, fchown,
 * mmap, shared memory), so SQLite is built with SQLITE_OS_OTHER=1 and this file
 * is its only VFS, "spine", the default. It uses the POSIX calls WASI has:
 * open, pread, pwrite, ftruncate, fsync, fstat, stat, access, unlink.
 *
 * - Locks: the Guest is one single-threaded program, so no other process can
 *   open its files. Locks are kept in a table in memory, one entry per file
 *   (device and inode), which serialises the connections of one program the way
 *   POSIX advisory locks serialise processes.
 * - Temporary files (SQLite opens them without a name: sorts, temporary tables,
 *   statement journals) live in memory.
 * - No shared memory, so no WAL (SQLITE_OMIT_WAL): the journal is a rollback
 *   journal beside the database.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3.h"

#define SPINE_MAX_PATHNAME 1024

/*
 * One entry per open file: the locks its connections hold. A file is known by
 * its device and inode, or by its path on a file system that numbers no inodes.
 */
struct spine_inode {
	dev_t dev;
	ino_t ino;
	char *path; /* when ino is 0 */
	int refs;
	int shared;    /* connections holding SHARED or more */
	int reserved;  /* a connection holds RESERVED */
	int pending;   /* a connection holds PENDING */
	int exclusive; /* a connection holds EXCLUSIVE */
	struct spine_inode *next;
};

static struct spine_inode *spine_inodes;

struct spine_file {
	sqlite3_file base;
	int fd;
	int lock;                  /* this connection's lock level */
	int reserved;              /* this connection holds the RESERVED lock */
	struct spine_inode *inode; /* NULL for a memory file */
	unsigned char *data;       /* a memory file's bytes */
	sqlite3_int64 size, capacity;
};

/* Files on the file system. */

static int
spine_close(sqlite3_file *file)
{
	struct spine_file *f = (struct spine_file *)file;
	struct spine_inode **p;

	if (f->inode != NULL && --f->inode->refs == 0) {
		for (p = &spine_inodes; *p != NULL; p = &(*p)->next) {
			if (*p == f->inode) {
				*p = f->inode->next;
				sqlite3_free(f->inode->path);
				sqlite3_free(f->inode);
				break;
			}
		}
	}
	f->inode = NULL;
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	return SQLITE_OK;
}

static int
spine_read(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset)
{
	struct spine_file *f = (struct spine_file *)file;
	int done = 0;

	while (done < amount) {
		ssize_t n = pread(f->fd, (char *)buf + done, (size_t)(amount - done), offset + done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return SQLITE_IOERR_READ;
		if (n == 0)
			break;
		done += (int)n;
	}
	if (done < amount) {
		memset((char *)buf + done, 0, (size_t)(amount - done));
		return SQLITE_IOERR_SHORT_READ;
	}
	return SQLITE_OK;
}

static int
spine_write(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset)
{
	struct spine_file *f = (struct spine_file *)file;
	int done = 0;

	while (done < amount) {
		ssize_t n = pwrite(f->fd, (const char *)buf + done, (size_t)(amount - done), offset + done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == ENOSPC || errno == EDQUOT))
			return SQLITE_FULL;
		if (n <= 0)
			return SQLITE_IOERR_WRITE;
		done += (int)n;
	}
	return SQLITE_OK;
}

static int
spine_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct spine_file *f = (struct spine_file *)file;

	return ftruncate(f->fd, size) == 0 ? SQLITE_OK : SQLITE_IOERR_TRUNCATE;
}

static int
spine_sync(sqlite3_file *file, int flags)
{
	struct spine_file *f = (struct spine_file *)file;

	(void)flags;
	if (fsync(f->fd) == 0)
		return SQLITE_OK;
	/* A file system that keeps nothing to sync (one in memory) may say so. */
	if (errno == EINVAL || errno == ENOTSUP || errno == ENOSYS)
		return SQLITE_OK;
	return SQLITE_IOERR_FSYNC;
}

static int
spine_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
	struct spine_file *f = (struct spine_file *)file;
	struct stat st;

	if (fstat(f->fd, &st) != 0)
		return SQLITE_IOERR_FSTAT;
	*size = st.st_size;
	return SQLITE_OK;
}

/* SQLite asks for SHARED, RESERVED, EXCLUSIVE (through PENDING) and releases to SHARED or NONE. */
static int
spine_lock(sqlite3_file *file, int level)
{
	struct spine_file *f = (struct spine_file *)file;
	struct spine_inode *in = f->inode;

	if (f->lock >= level)
		return SQLITE_OK;
	switch (level) {
	case SQLITE_LOCK_SHARED:
		if (in->pending || in->exclusive)
			return SQLITE_BUSY;
		in->shared++;
		break;
	case SQLITE_LOCK_RESERVED:
		if (in->reserved || in->pending || in->exclusive)
			return SQLITE_BUSY;
		in->reserved = 1;
		f->reserved = 1;
		break;
	case SQLITE_LOCK_EXCLUSIVE:
		if (f->lock < SQLITE_LOCK_PENDING) {
			if (in->pending || in->exclusive)
				return SQLITE_BUSY;
			in->pending = 1;
			f->lock = SQLITE_LOCK_PENDING;
		}
		/* Exclusive once every other reader is gone; PENDING keeps new ones out. */
		if (in->shared > 1)
			return SQLITE_BUSY;
		in->exclusive = 1;
		break;
	default:
		return SQLITE_MISUSE;
	}
	f->lock = level;
	return SQLITE_OK;
}

static int
spine_unlock(sqlite3_file *file, int level)
{
	struct spine_file *f = (struct spine_file *)file;
	struct spine_inode *in = f->inode;

	if (f->lock <= level)
		return SQLITE_OK;
	if (f->lock >= SQLITE_LOCK_EXCLUSIVE)
		in->exclusive = 0;
	if (f->lock >= SQLITE_LOCK_PENDING)
		in->pending = 0;
	if (f->reserved && level < SQLITE_LOCK_RESERVED)
		in->reserved = f->reserved = 0;
	if (level == SQLITE_LOCK_NONE)
		in->shared--;
	f->lock = level;
	return SQLITE_OK;
}

static int
spine_check_reserved(sqlite3_file *file, int *out)
{
	struct spine_file *f = (struct spine_file *)file;

	*out = f->inode->reserved || f->inode->pending || f->inode->exclusive;
	return SQLITE_OK;
}

static int
spine_file_control(sqlite3_file *file, int op, void *arg)
{
	(void)file;
	(void)op;
	(void)arg;
	return SQLITE_NOTFOUND;
}

static int
spine_sector_size(sqlite3_file *file)
{
	(void)file;
	return 512;
}

static int
spine_device_characteristics(sqlite3_file *file)
{
	(void)file;
	return 0;
}

static const sqlite3_io_methods spine_disk_methods = {
	1,
	spine_close,
	spine_read,
	spine_write,
	spine_truncate,
	spine_sync,
	spine_file_size,
	spine_lock,
	spine_unlock,
	spine_check_reserved,
	spine_file_control,
	spine_sector_size,
	spine_device_characteristics,
};

/* Temporary files, in memory. No other connection sees them: no locks. */

static int
spine_mem_close(sqlite3_file *file)
{
	struct spine_file *f = (struct spine_file *)file;

	sqlite3_free(f->data);
	f->data = NULL;
	f->size = f->capacity = 0;
	return SQLITE_OK;
}

static int
spine_mem_read(sqlite3_file *file, void *buf, int amount, sqlite3_int64 offset)
{
	struct spine_file *f = (struct spine_file *)file;
	sqlite3_int64 have = offset < f->size ? f->size - offset : 0;

	if (have >= amount) {
		memcpy(buf, f->data + offset, (size_t)amount);
		return SQLITE_OK;
	}
	if (have > 0)
		memcpy(buf, f->data + offset, (size_t)have);
	memset((char *)buf + have, 0, (size_t)(amount - have));
	return SQLITE_IOERR_SHORT_READ;
}

static int
spine_mem_grow(struct spine_file *f, sqlite3_int64 need)
{
	sqlite3_int64 capacity = f->capacity ? f->capacity : 8192;
	unsigned char *data;

	if (need <= f->capacity)
		return SQLITE_OK;
	while (capacity < need)
		capacity *= 2;
	data = sqlite3_realloc64(f->data, (sqlite3_uint64)capacity);
	if (data == NULL)
		return SQLITE_IOERR_NOMEM;
	f->data = data;
	f->capacity = capacity;
	return SQLITE_OK;
}

static int
spine_mem_write(sqlite3_file *file, const void *buf, int amount, sqlite3_int64 offset)
{
	struct spine_file *f = (struct spine_file *)file;
	sqlite3_int64 end = offset + amount;
	int rc;

	if (offset < 0 || amount < 0)
		return SQLITE_IOERR_WRITE;
	if ((rc = spine_mem_grow(f, end)) != SQLITE_OK)
		return rc;
	if (offset > f->size)
		memset(f->data + f->size, 0, (size_t)(offset - f->size));
	memcpy(f->data + offset, buf, (size_t)amount);
	if (end > f->size)
		f->size = end;
	return SQLITE_OK;
}

static int
spine_mem_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	struct spine_file *f = (struct spine_file *)file;

	if (size < f->size)
		f->size = size < 0 ? 0 : size;
	return SQLITE_OK;
}

static int
spine_mem_sync(sqlite3_file *file, int flags)
{
	(void)file;
	(void)flags;
	return SQLITE_OK;
}

static int
spine_mem_file_size(sqlite3_file *file, sqlite3_int64 *size)
{
	*size = ((struct spine_file *)file)->size;
	return SQLITE_OK;
}

static int
spine_mem_lock(sqlite3_file *file, int level)
{
	((struct spine_file *)file)->lock = level;
	return SQLITE_OK;
}

static int
spine_mem_check_reserved(sqlite3_file *file, int *out)
{
	(void)file;
	*out = 0;
	return SQLITE_OK;
}

static const sqlite3_io_methods spine_mem_methods = {
	1,
	spine_mem_close,
	spine_mem_read,
	spine_mem_write,
	spine_mem_truncate,
	spine_mem_sync,
	spine_mem_file_size,
	spine_mem_lock,
	spine_mem_lock,
	spine_mem_check_reserved,
	spine_file_control,
	spine_sector_size,
	spine_device_characteristics,
};

/* The VFS. */

static int
spine_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags)
{
	struct spine_file *f = (struct spine_file *)file;
	struct spine_inode *in;
	struct stat st;
	int oflags;

	(void)vfs;
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	if (name == NULL) {
		f->base.pMethods = &spine_mem_methods;
		if (out_flags != NULL)
			*out_flags = flags;
		return SQLITE_OK;
	}
	oflags = (flags & SQLITE_OPEN_READWRITE) ? O_RDWR : O_RDONLY;
	if (flags & SQLITE_OPEN_CREATE)
		oflags |= O_CREAT;
	if (flags & SQLITE_OPEN_EXCLUSIVE)
		oflags |= O_EXCL;
	f->fd = open(name, oflags, 0644);
	if (f->fd < 0 && (flags & SQLITE_OPEN_READWRITE) && errno != EISDIR && errno != ENOENT) {
		/* A file it may only read: SQLite opens it read-only and says so. */
		flags &= ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
		flags |= SQLITE_OPEN_READONLY;
		f->fd = open(name, O_RDONLY);
	}
	if (f->fd < 0)
		return SQLITE_CANTOPEN;
	if (fstat(f->fd, &st) != 0) {
		close(f->fd);
		f->fd = -1;
		return SQLITE_CANTOPEN;
	}
	for (in = spine_inodes; in != NULL; in = in->next)
		if (in->dev == st.st_dev && in->ino == st.st_ino &&
		    (st.st_ino != 0 || strcmp(in->path, name) == 0))
			break;
	if (in == NULL) {
		in = sqlite3_malloc(sizeof(*in));
		if (in != NULL) {
			memset(in, 0, sizeof(*in));
			if (st.st_ino == 0 && (in->path = sqlite3_mprintf("%s", name)) == NULL) {
				sqlite3_free(in);
				in = NULL;
			}
		}
		if (in == NULL) {
			close(f->fd);
			f->fd = -1;
			return SQLITE_NOMEM;
		}
		in->dev = st.st_dev;
		in->ino = st.st_ino;
		in->next = spine_inodes;
		spine_inodes = in;
	}
	in->refs++;
	f->inode = in;
	f->base.pMethods = &spine_disk_methods;
	if (flags & SQLITE_OPEN_DELETEONCLOSE)
		unlink(name); /* the open descriptor keeps the file until it is closed */
	if (out_flags != NULL)
		*out_flags = flags;
	return SQLITE_OK;
}

static int
spine_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	(void)sync_dir;
	if (unlink(name) == 0)
		return SQLITE_OK;
	return errno == ENOENT ? SQLITE_IOERR_DELETE_NOENT : SQLITE_IOERR_DELETE;
}

static int
spine_access(sqlite3_vfs *vfs, const char *name, int what, int *out)
{
	struct stat st;

	(void)vfs;
	if (what == SQLITE_ACCESS_EXISTS)
		/* An empty file is no database, and no journal to roll back. */
		*out = stat(name, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_size > 0);
	else
		*out = access(name, R_OK | W_OK) == 0;
	return SQLITE_OK;
}

static int
spine_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out)
{
	size_t n = strlen(name);

	(void)vfs;
	if (name[0] == '/') {
		if (n >= (size_t)size)
			return SQLITE_CANTOPEN;
		memcpy(out, name, n + 1);
		return SQLITE_OK;
	}
	if (getcwd(out, (size_t)size) == NULL)
		return SQLITE_CANTOPEN;
	if (strlen(out) + 1 + n >= (size_t)size)
		return SQLITE_CANTOPEN;
	if (strcmp(out, "/") != 0)
		strcat(out, "/");
	strcat(out, name);
	return SQLITE_OK;
}

static int
spine_randomness(sqlite3_vfs *vfs, int size, char *out)
{
	int done = 0;

	(void)vfs;
	while (done < size) {
		int n = size - done > 256 ? 256 : size - done;
		if (getentropy(out + done, (size_t)n) != 0)
			break;
		done += n;
	}
	return done;
}

static int
spine_sleep(sqlite3_vfs *vfs, int microseconds)
{
	(void)vfs;
	usleep((useconds_t)microseconds);
	return microseconds;
}

static int
spine_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	struct timespec ts;

	(void)vfs;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return SQLITE_ERROR;
	/* Milliseconds since the Julian epoch: 2440587.5 days before the Unix epoch. */
	*out = (sqlite3_int64)24405875 * 8640000 + (sqlite3_int64)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	return SQLITE_OK;
}

static int
spine_current_time(sqlite3_vfs *vfs, double *out)
{
	sqlite3_int64 ms;
	int rc = spine_current_time_int64(vfs, &ms);

	*out = ms / 86400000.0;
	return rc;
}

static int
spine_last_error(sqlite3_vfs *vfs, int size, char *out)
{
	(void)vfs;
	if (size > 0)
		out[0] = 0;
	return errno;
}

static sqlite3_vfs spine_vfs = {
	2,
	sizeof(struct spine_file),
	SPINE_MAX_PATHNAME,
	NULL,
	"spine",
	NULL,
	spine_open,
	spine_delete,
	spine_access,
	spine_full_pathname,
	NULL, /* no extension loading: xDlOpen and the rest are never called */
	NULL,
	NULL,
	NULL,
	spine_randomness,
	spine_sleep,
	spine_current_time,
	spine_last_error,
	spine_current_time_int64,
};

int
sqlite3_os_init(void)
{
	return sqlite3_vfs_register(&spine_vfs, 1);
}

int
sqlite3_os_end(void)
{
	return SQLITE_OK;
}
