package gpuclaim

import (
	"testing"
	"time"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger/ledgertest"
)

// Every GPU the ledger offers has an ID that the allocation annotations can carry: the ledger
// and the annotation parser accept the same range (apiv1.MaxGPUID), so that a pod is never bound
// to a GPU its webhook, agent or kubectl gpu cannot read back.
func TestLedgerAndAnnotationsAcceptTheSameGPUIDs(t *testing.T) {
	gns := ledgertest.SeedStatus("n", time.Now())
	gns.Status.Devices = nil
	for _, id := range []int32{0, apiv1.MaxGPUID, apiv1.MaxGPUID + 1, 999, 1000, 1 << 20} {
		gns.Status.Devices = append(gns.Status.Devices, apiv1.Device{ID: id, Health: apiv1.Healthy})
	}
	n := ledger.NodeFromStatus(gns)
	var ids []int
	for _, g := range n.GPUs {
		ids = append(ids, g.ID)
		if _, err := apiv1.ParseIDs(apiv1.FormatIDs([]int{g.ID})); err != nil {
			t.Errorf("the ledger offers GPU %d, which the annotation parser refuses: %v", g.ID, err)
		}
		if _, err := apiv1.LeaseName("n", g.ID); err != nil {
			t.Errorf("the ledger offers GPU %d, which cannot be locked: %v", g.ID, err)
		}
	}
	if len(ids) != 2 || ids[0] != 0 || ids[1] != apiv1.MaxGPUID {
		t.Errorf("ledger GPUs %v; want 0 and %d, the IDs in range", ids, apiv1.MaxGPUID)
	}
}
