// Package filelock is flock(2) for Spine's files shared between processes:
// the file:// session store's lock and temporary files, and the folder a
// Runner keeps its hibernated sessions in. A lock lasts until its file is
// closed or its process dies, so a process killed with SIGKILL holds none.
// Where flock(2) does not exist, locks hold nothing and TryHold reports
// false (nothing is taken for abandoned).
package filelock
