package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// subcommandConfig is the client configuration of a one-shot subcommand (apply-crds, check):
// --kubeconfig when given, else controller-runtime's usual lookup (in-cluster in a hook or test
// pod), with the subcommand's own user agent so the API server's logs tell them apart.
func subcommandConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	if kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the client configuration: %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}
