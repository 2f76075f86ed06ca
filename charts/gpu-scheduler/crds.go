// Package chart carries the chart's CustomResourceDefinitions (crds/, written by make generate)
// into gpu-controller, whose apply-crds subcommand is the chart's pre-install/pre-upgrade hook:
// Helm installs crds/ on a first install only and never upgrades them. The file sits beside
// crds/ because hack/update-codegen.sh deletes and rewrites that folder; .helmignore keeps it
// out of the chart package.
package chart

import "embed"

// CRDs holds crds/*.yaml, one CustomResourceDefinition per file.
//
//go:embed crds/*.yaml
var CRDs embed.FS
