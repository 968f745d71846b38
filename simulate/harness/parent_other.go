//go:build !linux

package harness

import "os/exec"

// DieWithParent does nothing where the kernel cannot tie a child's life to
// its parent's (Linux's PR_SET_PDEATHSIG); stop what you start.
func DieWithParent(*exec.Cmd) {}
