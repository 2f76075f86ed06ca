// Command gpu-sim drives the simulation harness: `gpu-sim cluster up|down|status|bench` manages a
// local control plane with kwok fake GPU nodes (package sim/cluster).
//
// Subcommands live one per file and register themselves in init (see register), so a new one —
// `run`, the simulator — is a new file and touches nothing here.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// commands are the top-level subcommands, added by register from each subcommand's file.
var commands []func() *cobra.Command

// register adds a top-level subcommand; call it from an init function.
func register(newCommand func() *cobra.Command) { commands = append(commands, newCommand) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpu-sim",
		Short:         "Simulation harness for gpu-scheduler: a local control plane with fake GPU nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlagSet(klogFlags)
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

func main() {
	// SIGINT/SIGTERM cancel the context, so a foreground cluster stops cleanly on Ctrl-C and on
	// `gpu-sim cluster down`.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = klog.NewContext(ctx, klog.Background())
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	klog.Flush() //nolint:logcheck // a main flushes klog's backend before it exits; there is no contextual form
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-sim:", err)
		os.Exit(1)
	}
}
