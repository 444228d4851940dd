//go:build !linux

package main

import "syscall"

// sysProcAttr puts kube-controller-manager in its own process group (a Ctrl-C reaches this program,
// which stops it in order).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
