package bench

import (
	"os/exec"
	"syscall"
)

// dieWithBench has the kernel stop a party process when the bench dies
// without stopping it (killed, crashed): no orphan keeps serving.
func dieWithBench(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
