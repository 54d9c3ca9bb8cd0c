//go:build unix

package keys

import (
	"io/fs"
	"os"
	"slices"
	"syscall"
)

// rootOwnedInOurGroup reports whether root owns the file and its group is one
// of this process's groups.
func rootOwnedInOurGroup(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 {
		return false
	}
	gid := int(st.Gid)
	if gid == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, gid)
}
