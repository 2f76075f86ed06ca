package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gpu-scheduler/gpu-scheduler/sim/profile"
)

// CauseTable writes the profiled runs' CPU per bound pod by process and cause (gpu-sim run
// --profile), one block per run.
func (r *Report) CauseTable(w io.Writer) {
	for _, x := range r.Runs {
		if len(x.CPUCauses) == 0 {
			continue
		}
		fmt.Fprintf(w, "CPU per bound pod by cause (%s; measured CPU split by profile samples):\n", x.Mode)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		for _, b := range x.CPUCauses {
			fmt.Fprintf(tw, "  %s\t%.1f ms\t%.0f s profiled of %.0f s\t\n", b.Process, b.MsPerPod, b.ProfiledSeconds, b.Seconds)
			for _, s := range b.Shares {
				if s.Fraction < 0.01 {
					continue
				}
				fmt.Fprintf(tw, "    %s\t%.1f ms\t%.0f %%\t\n", s.Cause, s.MsPerPod, 100*s.Fraction)
			}
		}
		_ = tw.Flush()
		var rest []string
		for name, sec := range x.WorkloadCPUSeconds {
			if !profiled(x.CPUCauses, name) && x.Metrics.Bound > 0 {
				rest = append(rest, fmt.Sprintf("%s %.1f ms", name, 1000*sec/float64(x.Metrics.Bound)))
			}
		}
		sort.Strings(rest)
		if len(rest) > 0 {
			fmt.Fprintf(w, "  not profiled: %s\n", strings.Join(rest, ", "))
		}
	}
}

func profiled(bs []profile.Breakdown, name string) bool {
	for _, b := range bs {
		if b.Process == name {
			return true
		}
	}
	return false
}
