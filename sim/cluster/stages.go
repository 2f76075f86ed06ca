package cluster

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// AnnotationDuration on a pod sets how long after it starts running kwok marks it Succeeded (a
// Go duration, "30s"). Pods without it run until deleted. See stages/pod-complete.yaml.
const AnnotationDuration = "sim.gpu.scheduling/duration"

// The kwok stages are data: YAML files embedded here, written next to kwok's configuration and
// read by the kwok binary itself, so the behaviour is exactly what kwok decodes.
//
//go:embed stages/*.yaml
var stageFS embed.FS

// StageFiles returns the embedded stage documents by file name, sorted.
func StageFiles() (map[string][]byte, []string, error) {
	files := map[string][]byte{}
	err := fs.WalkDir(stageFS, "stages", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := stageFS.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading embedded stage %s: %w", path, err)
		}
		files[d.Name()] = b
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return files, names, nil
}

// kwokOptions is the part of kwok's KwokConfiguration (config.kwok.x-k8s.io/v1alpha1) we set.
type kwokOptions struct {
	ManageNodesWithAnnotationSelector string `json:"manageNodesWithAnnotationSelector"`
	ServerAddress                     string `json:"serverAddress"`
	CIDR                              string `json:"cidr"`
	NodeIP                            string `json:"nodeIP"`
	NodeLeaseDurationSeconds          uint   `json:"nodeLeaseDurationSeconds"`
	NodeLeaseParallelism              uint   `json:"nodeLeaseParallelism"`
	NodePlayStageParallelism          uint   `json:"nodePlayStageParallelism"`
	PodPlayStageParallelism           uint   `json:"podPlayStageParallelism"`
}

type kwokConfiguration struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Options    kwokOptions `json:"options"`
}

// Annotation and value that mark a node as kwok's to play (see CreateNodePool).
const (
	AnnotationKwokNode = "kwok.x-k8s.io/node"
	KwokNodeValue      = "fake"
)

// writeKwokConfig writes kwok's configuration and every stage into dir and returns the files in
// the order kwok is given them (--config, repeated).
func writeKwokConfig(dir string, leaseSeconds uint, serverAddress string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating kwok config dir %s: %w", dir, err)
	}
	cfg := kwokConfiguration{
		APIVersion: "config.kwok.x-k8s.io/v1alpha1",
		Kind:       "KwokConfiguration",
		Options: kwokOptions{
			ManageNodesWithAnnotationSelector: AnnotationKwokNode + "=" + KwokNodeValue,
			ServerAddress:                     serverAddress,
			CIDR:                              "10.0.0.0/8",
			NodeIP:                            "10.255.255.254",
			NodeLeaseDurationSeconds:          leaseSeconds,
			// Parallel workers let 5,000 nodes initialise and their leases be created in
			// seconds; the apiserver, not kwok, is what limits the rate on two cores. Node
			// stages run at setup (node-initialize) and every ten minutes per node
			// (heartbeat): 64 workers made 1,000 nodes Ready in 8.8-9.2 s instead of
			// 10.5-16.2 s, and change nothing while a workload runs. Leases and pods keep 16:
			// their rates during the workload are what the figures measure.
			NodeLeaseParallelism:     16,
			NodePlayStageParallelism: 64,
			PodPlayStageParallelism:  16,
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding kwok configuration: %w", err)
	}
	paths := []string{filepath.Join(dir, "kwok.yaml")}
	if err := os.WriteFile(paths[0], b, 0o600); err != nil {
		return nil, fmt.Errorf("writing kwok configuration %s: %w", paths[0], err)
	}
	files, names, err := StageFiles()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		p := filepath.Join(dir, "stage-"+strings.TrimSuffix(n, ".yaml")+".yaml")
		if err := os.WriteFile(p, files[n], 0o600); err != nil {
			return nil, fmt.Errorf("writing kwok stage %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
