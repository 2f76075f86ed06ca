package v1

import (
	"reflect"
	"strings"
	"testing"
)

func TestMIGLeaseNameRoundTrip(t *testing.T) {
	for _, c := range []struct {
		node      string
		id, slot  int
		wantName  string
		wantError bool
	}{
		{"node-a", 3, 0, "gpu-node-a-3-mig0", false},
		{"a-3-mig2", 0, 4, "gpu-a-3-mig2-0-mig4", false},
		{"node-a", 3, MaxMIGSlot + 1, "", true},
		{"node-a", MaxGPUID + 1, 0, "", true},
	} {
		name, err := MIGLeaseName(c.node, c.id, c.slot)
		if (err != nil) != c.wantError || name != c.wantName {
			t.Fatalf("MIGLeaseName(%q,%d,%d) = %q, %v", c.node, c.id, c.slot, name, err)
		}
		if c.wantError {
			continue
		}
		node, ref, ok := ParseMIGLeaseName(name)
		if !ok || node != c.node || ref != (MIGDeviceRef{GPU: c.id, Slot: c.slot}) {
			t.Fatalf("ParseMIGLeaseName(%q) = %q %v %v", name, node, ref, ok)
		}
		// A MIG lease is never read as a whole GPU's lease, nor the other way round.
		if _, _, ok := ParseLeaseName(name); ok {
			t.Fatalf("ParseLeaseName(%q) took a MIG lease for a whole GPU's", name)
		}
	}
	whole, _ := LeaseName("node-a-mig1", 2)
	if _, _, ok := ParseMIGLeaseName(whole); ok {
		t.Fatalf("ParseMIGLeaseName(%q) took a whole GPU's lease for a MIG lease", whole)
	}
}

func TestParseMIGDevices(t *testing.T) {
	got, err := ParseMIGDevices("3:4,1:0,3:0")
	if err != nil {
		t.Fatal(err)
	}
	want := []MIGDeviceRef{{1, 0}, {3, 0}, {3, 4}}
	if !reflect.DeepEqual(got, want) || FormatMIGDevices(got) != "1:0,3:0,3:4" {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{"", "3", "3:", "3:01", "x:1", "3:1,3:1", "3:16", "64:0"} {
		if _, err := ParseMIGDevices(bad); err == nil {
			t.Errorf("ParseMIGDevices(%q) accepted", bad)
		}
	}
}

func TestShares(t *testing.T) {
	s := ResolvedShare{MemoryMiB: 20480, ComputePercent: 25}
	if v := FormatShare(s); v != "memoryMiB=20480,computePercent=25" {
		t.Fatalf("FormatShare = %q", v)
	}
	if got, err := ParseShare(FormatShare(s)); err != nil || got != s {
		t.Fatalf("ParseShare = %v %v", got, err)
	}
	if _, err := ParseShare("memory=1"); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("ParseShare took an unknown key: %v", err)
	}
	v := FormatLeaseShares([]string{"u1", "u2"}, map[string]ResolvedShare{"u1": s})
	if v != "u1=20480/25,u2=0/0" {
		t.Fatalf("FormatLeaseShares = %q", v)
	}
	got, err := ParseLeaseShares(v + ",junk")
	if err == nil || len(got) != 2 || got["u1"] != s {
		t.Fatalf("ParseLeaseShares = %v, %v", got, err)
	}
}
