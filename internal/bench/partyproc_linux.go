package bench

import (
	"os/exec"
	"syscall"
)

// dieWithBench has the kernel stop a party process when the bench dies
// without stopping it (killed, crashed): no orphan keeps serving. (The
// signal follows the OS thread that started the child; the bench locks no
// goroutine to a thread, so the runtime does not end its threads early.)
func dieWithBench(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
