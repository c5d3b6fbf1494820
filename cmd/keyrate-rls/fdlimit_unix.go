//go:build unix

package main

import "syscall"

// fileLimit returns the process's limit of open files (its soft
// RLIMIT_NOFILE, which Go raises to the hard one at start), or 0 when it
// cannot tell.
func fileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
