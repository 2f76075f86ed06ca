// Command kubectl-gpu is the kubectl gpu plugin: put it on PATH and run `kubectl gpu status`.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/gpu-scheduler/gpu-scheduler/kubectlgpu"
)

func main() {
	cmd := kubectlgpu.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
