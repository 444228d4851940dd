package main

import "syscall"

// sysProcAttr puts kube-controller-manager in its own process group (a Ctrl-C reaches this program,
// which stops it in order) and kills it should this program die without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
