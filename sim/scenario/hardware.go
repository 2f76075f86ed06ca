package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

// A node pool's GPUs come from a preset (topology: dgx-h100, one of scenarios/hardware), from
// a description inline in the pool (hardware: {...}) or from a file of one (hardwareFile:).
// The description is agent/mock's Hardware: the mock NVML is built from it, so the production
// agent discovers its islands and bandwidths as it would on the machine described.

// LoadHardwareFile reads, strictly decodes and validates one hardware file, reporting each
// problem with its line and field path, like a scenario.
func LoadHardwareFile(path string) (*mock.Hardware, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading hardware %s: %w", path, err)
	}
	return LoadHardware(path, data)
}

// LoadHardware decodes data (named file in errors) as a hardware description.
func LoadHardware(file string, data []byte) (*mock.Hardware, error) {
	var doc yamlv3.Node
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Errs: []FieldError{{Msg: "the file is empty; start from scenarios/hardware/dgx-h100.yaml"}}}
		}
		return nil, &Error{File: file, Errs: []FieldError{{Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	c := &checker{lines: map[string]int{}}
	root := &doc
	if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	c.walk(root, reflect.TypeOf(mock.Hardware{}), "")
	if len(c.errs) > 0 {
		return nil, c.result(file)
	}
	var h mock.Hardware
	if err := yaml.Unmarshal(data, &h); err != nil {
		return nil, &Error{File: file, Errs: []FieldError{{Msg: err.Error()}}}
	}
	if h.APIVersion != mock.HardwareAPIVersion {
		c.add("apiVersion", "must be %s, got %q", mock.HardwareAPIVersion, h.APIVersion)
	}
	if h.Kind != mock.HardwareKind {
		c.add("kind", "must be %s, got %q", mock.HardwareKind, h.Kind)
	}
	c.validateHardware("", &h)
	if len(c.errs) > 0 {
		return nil, c.result(file)
	}
	return &h, nil
}

// validateHardware adds the description's own problems under prefix (the pool's path).
func (c *checker) validateHardware(prefix string, h *mock.Hardware) {
	for _, e := range h.Validate() {
		if prefix != "" && (e.Path == "apiVersion" || e.Path == "kind") {
			continue // inline descriptions may leave them out
		}
		c.add(join(prefix, e.Path), "%s", e.Msg)
	}
}

// resolveHardware reads each pool's hardwareFile (relative to the scenario file), checks each
// inline description, and names the pool's topology after its hardware.
func (c *checker) resolveHardware(file string, s *Scenario) {
	for i := range s.Spec.NodePools {
		p := &s.Spec.NodePools[i]
		path := fmt.Sprintf("spec.nodePools[%d]", i)
		given := 0
		for _, set := range []bool{p.Topology != "", p.Hardware != nil, p.HardwareFile != ""} {
			if set {
				given++
			}
		}
		if given > 1 {
			c.add(path, "give one of topology (a preset), hardware (inline) or hardwareFile, not several")
			continue
		}
		if p.HardwareFile != "" {
			hf := p.HardwareFile
			if !filepath.IsAbs(hf) {
				hf = filepath.Join(filepath.Dir(file), hf)
			}
			h, err := LoadHardwareFile(hf)
			if err != nil {
				c.add(path+".hardwareFile", "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
				continue
			}
			p.Hardware = h
		} else if p.Hardware != nil {
			before := len(c.errs)
			c.validateHardware(path+".hardware", p.Hardware)
			if len(c.errs) > before {
				p.Hardware.Metadata.Name = "" // keeps validatePools from reporting it again
				continue
			}
		} else {
			continue
		}
		name := p.Hardware.Metadata.Name
		if preset, ok := mock.Lookup(name); ok && !sameSpec(preset, p.Hardware) {
			c.add(path+".hardware.metadata.name", "%q is a preset's name; give your hardware its own name", name)
			p.Hardware.Metadata.Name = ""
			continue
		}
		p.Topology = name
	}
	for i, p := range s.Spec.NodePools {
		for j := range i {
			q := s.Spec.NodePools[j]
			if p.Hardware != nil && q.Hardware != nil && p.Topology != "" && p.Topology == q.Topology && !sameSpec(p.Hardware, q.Hardware) {
				c.add(fmt.Sprintf("spec.nodePools[%d].hardware.metadata.name", i), "%q also names pool %s's different hardware; give each its own name", p.Topology, q.Name)
			}
		}
	}
}

func sameSpec(a, b *mock.Hardware) bool {
	x, _ := yaml.Marshal(a.Spec)
	y, _ := yaml.Marshal(b.Spec)
	return bytes.Equal(x, y)
}

// RegisterHardware makes the scenario's own hardware (inline or from files) known to the mock
// NVML, so the in-process agent fleet builds its nodes' GPUs from it. Presets need nothing.
func RegisterHardware(s *Scenario) error {
	for _, p := range s.Spec.NodePools {
		if p.Hardware == nil {
			continue
		}
		if err := mock.Register(p.Hardware); err != nil {
			return fmt.Errorf("node pool %s: %w", p.Name, err)
		}
	}
	return nil
}
