// Package hardware holds the shipped GPU node descriptions (presets) as data: one YAML file per
// kind of node, named for it. They are embedded so that the mock NVML (agent/mock), the agent
// fleet and the simulator find them wherever they run. docs/simulator.md describes the format.
package hardware

import "embed"

// Files are the preset files, <name>.yaml.
//
//go:embed *.yaml
var Files embed.FS
