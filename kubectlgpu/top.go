package kubectlgpu

import (
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TopRow is one GPU's load as the agent last published it. A nil field is one the agent does
// not report (no NVML reading, or an agent too old to publish it): printed "n/a".
type TopRow struct {
	Node               string `json:"node"`
	ID                 int    `json:"id"`
	Model              string `json:"model,omitempty"`
	Health             string `json:"health"`
	Holder             string `json:"holder,omitempty"`
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`
	MemoryUsedMiB      *int64 `json:"memoryUsedMiB,omitempty"`
	MemoryMiB          int64  `json:"memoryMiB,omitempty"`
	TemperatureCelsius *int32 `json:"temperatureCelsius,omitempty"`
	PowerWatts         *int32 `json:"powerWatts,omitempty"`
}

// telemetry copies what a GpuNodeStatus device says about its load into a row.
func telemetry(r *TopRow, d apiv1.Device) {
	r.UtilizationPercent = d.UtilizationPercent
	r.MemoryMiB = d.MemoryMiB
	r.MemoryUsedMiB = d.MemoryUsedMiB
	r.TemperatureCelsius = d.TemperatureCelsius
	r.PowerWatts = d.PowerWatts
}

// TopRows joins the devices of every GpuNodeStatus with their holders, in node and ID order.
func TopRows(statuses []apiv1.GpuNodeStatus, nodes []NodeView) []TopRow {
	holders := map[string]map[int]string{}
	for _, n := range nodes {
		holders[n.Name] = map[int]string{}
		for _, g := range n.GPUs {
			if len(g.Holders) > 0 {
				holders[n.Name][g.ID] = g.Holders[0]
			}
		}
	}
	out := []TopRow{}
	for _, s := range statuses {
		node := s.Spec.NodeName
		if node == "" {
			node = s.Name
		}
		for _, d := range s.Status.Devices {
			r := TopRow{Node: node, ID: int(d.ID), Model: d.Product, Health: string(d.Health), Holder: holders[node][int(d.ID)]}
			if r.Health == "" {
				r.Health = string(apiv1.Unknown)
			}
			telemetry(&r, d)
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func orNA[T int32 | int64](v *T, unit string) string {
	if v == nil {
		return "n/a"
	}
	return strconv.FormatInt(int64(*v), 10) + unit
}

func memory(r TopRow) string {
	switch {
	case r.MemoryUsedMiB != nil && r.MemoryMiB > 0:
		return fmt.Sprintf("%d/%d MiB", *r.MemoryUsedMiB, r.MemoryMiB)
	case r.MemoryUsedMiB != nil:
		return fmt.Sprintf("%d MiB", *r.MemoryUsedMiB)
	case r.MemoryMiB > 0:
		return fmt.Sprintf("n/a/%d MiB", r.MemoryMiB)
	}
	return "n/a"
}

func newTopCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:               "top [NODE]",
		Short:             "Per-GPU utilisation, memory, temperature and power as the agents report them (n/a where they do not)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			kc, dc, err := o.clients()
			if err != nil {
				return err
			}
			var notes Notes
			var statuses []apiv1.GpuNodeStatus
			hidden := false
			if err := listCustom(cmd.Context(), dc, "gpunodestatuses", "", &statuses); err != nil {
				if !notes.denied(err, "GPU nodes are not shown", permStatuses) {
					return err
				}
				hidden = true
			}
			if len(args) == 1 && !hidden {
				var mine []apiv1.GpuNodeStatus
				for _, s := range statuses {
					if s.Name == args[0] || s.Spec.NodeName == args[0] {
						mine = append(mine, s)
					}
				}
				if len(mine) == 0 {
					return fmt.Errorf("node %q has no GpuNodeStatus", args[0])
				}
				statuses = mine
			}
			var leases []coordinationv1.Lease
			if !hidden {
				l, err := kc.CoordinationV1().Leases("").List(cmd.Context(), metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
				switch {
				case err == nil:
					leases = l.Items
				case !notes.denied(err, "the pods holding each GPU are not shown", permLeases):
					return fmt.Errorf("listing GPU leases: %w", err)
				}
			}
			notes.print(o.IO.ErrOut)
			rows := TopRows(statuses, Build(statuses, leases, nil))
			if done, err := o.printData(o.IO.Out, "gpu", rows); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.tableOut(o.IO.Out), 0, 4, 2, ' ', 0)
			head := "NODE\tGPU\tUTIL\tMEMORY\tTEMP\tPOWER\tHOLDER"
			if o.Output == "wide" {
				head += "\tMODEL\tHEALTH"
			}
			fmt.Fprintln(w, head)
			for _, r := range rows {
				line := fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s", r.Node, r.ID, orNA(r.UtilizationPercent, "%"), memory(r),
					orNA(r.TemperatureCelsius, "C"), orNA(r.PowerWatts, "W"), dash(r.Holder))
				if o.Output == "wide" {
					line += "\t" + dash(r.Model) + "\t" + r.Health
				}
				fmt.Fprintln(w, line)
			}
			return w.Flush()
		},
	}
}
