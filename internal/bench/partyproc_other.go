//go:build !linux

package bench

import "os/exec"

// dieWithBench: only Linux stops a child when its parent dies.
func dieWithBench(*exec.Cmd) {}
