package harness

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd's process get SIGKILL when the process that
// started it exits, so a daemon or worker never outlives a harness that
// was killed.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
