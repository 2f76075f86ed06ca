// Command pause is the pod sandbox of the node tests (the kubelet's "pause" container): it holds
// the pod's namespaces by doing nothing until SIGTERM or SIGINT, and as the PID 1 of a pod that
// shares its process namespace it reaps the orphans handed to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (gpu-scheduler node tests)")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		// Exit 0 on SIGTERM and SIGINT, as the C pause does.
		os.Exit(0)
	}
}

// reap collects every exited child; signals coalesce, so one SIGCHLD may stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
