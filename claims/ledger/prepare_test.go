package ledger

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// TestPrepareOrder: each check refuses on its own, and where several apply the first in
// Prepare's order wins, so that the scheduler and kubectl gpu explain name the same cause.
func TestPrepareOrder(t *testing.T) {
	nobody := func(*apiv1.GpuClaim) (string, bool) { return "", false }
	someone := func(*apiv1.GpuClaim) (string, bool) { return "other", true }
	valid := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}
	invalid := apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 0}}
	plain := ledgertest.Pod("p", "c")
	templated := ledgertest.Pod("t", "")
	templated.Annotations[apiv1.AnnotationClaimTemplate] = "tmpl"
	pinned := ledgertest.IndexedPod(1) // its entry names two GPUs
	badMap := ledgertest.IndexedPod(1)
	badMap.Annotations[apiv1.AnnotationSchedulingMap] = "not a map"
	deleted := func(c *apiv1.GpuClaim) *apiv1.GpuClaim {
		c.DeletionTimestamp = &metav1.Time{}
		return c
	}
	tests := []struct {
		name   string
		claim  *apiv1.GpuClaim
		pod    *v1.Pod
		holder func(*apiv1.GpuClaim) (string, bool)
		want   Blocked
	}{
		{"ready", ledgertest.Claim("c", valid), plain, nobody, 0},
		{"a claim alone", ledgertest.Claim("c", valid), nil, nobody, 0},
		{"pinned", ledgertest.Claim("c1", valid), pinned, nobody, 0},
		{"deleted before everything", deleted(ledgertest.Claim("c", invalid)), templated, someone, BlockedDeleted},
		{"not owned before invalid", ledgertest.Claim("t", invalid), templated, someone, BlockedNotOwned},
		{"invalid before held", ledgertest.Claim("c", invalid), plain, someone, BlockedInvalid},
		{"held before the map", ledgertest.Claim("c1", valid), badMap, someone, BlockedHeld},
		{"a map that does not parse", ledgertest.Claim("c1", valid), badMap, nobody, BlockedPin},
		{"an entry of another size", ledgertest.Claim("c1", apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 3}}), pinned, nobody, BlockedPin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prep, refused := Prepare(tt.claim, tt.pod, tt.holder)
			var got Blocked
			if refused != nil {
				got = refused.Blocked
				if refused.Message == "" {
					t.Error("a refusal without a message")
				}
			}
			if got != tt.want {
				t.Fatalf("Prepare refused with %d (%+v), want %d", got, refused, tt.want)
			}
			if tt.want == 0 && (prep.Key != "ns/"+tt.claim.Name || prep.Req.Count != int(tt.claim.Spec.Devices.Count)) {
				t.Errorf("prepared %+v for claim %s", prep, tt.claim.Name)
			}
		})
	}
	if prep, _ := Prepare(ledgertest.Claim("c1", valid), pinned, nobody); prep.Pin == nil || len(prep.Req.Pinned) != 2 {
		t.Errorf("a pinned pod's request is not narrowed to its entry: %+v", prep)
	}
}
