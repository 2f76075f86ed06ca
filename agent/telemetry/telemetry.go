// Package telemetry exports each GPU's latest reading (utilisation, framebuffer, temperature,
// power, Xid and ECC counters) as Prometheus series named as NVIDIA's dcgm-exporter names them
// (its etc/default-counters.csv), with its labels gpu, UUID, pci_bus_id, device, modelName and
// Hostname. Dashboards and alerts written for dcgm-exporter then work on the agent's /metrics
// unchanged, on nodes that run no DCGM.
//
// The series are not stored: a Collector holds the latest reading per node and builds the
// series when it is scraped, so a GPU that goes away (or a node, in fleet mode) leaves no stale
// series behind and nothing is kept per GPU between scrapes.
package telemetry

import (
	"maps"
	"slices"
	"strconv"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpu-scheduler/gpu-scheduler/agent/gpu"
)

// GPU is one GPU's identity and latest reading.
type GPU struct {
	Index    int
	UUID     string
	PCIBusID string
	Model    string
	gpu.Telemetry
	// LastXid is the code of the last Xid error the agent has seen on the GPU.
	LastXid int64
}

// Labels of every series, as dcgm-exporter sets them.
var labels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}

func desc(name, help string) *metrics.Desc {
	return metrics.NewDesc(name, help, labels, nil, metrics.ALPHA, "")
}

// The series, by dcgm-exporter's field names. XID_ERRORS is, as in dcgm-exporter, the last Xid
// code (a gauge); the agent's own gpu_scheduler_agent_xid_errors_total{node,gpu,xid} counts them
// (package agent/metrics).
var (
	gpuUtil    = desc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
	memUtil    = desc("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
	fbUsed     = desc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
	fbFree     = desc("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
	gpuTemp    = desc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
	power      = desc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
	lastXid    = desc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
	eccSBE     = desc("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.")
	eccDBE     = desc("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.")
	everyDescs = []*metrics.Desc{gpuUtil, memUtil, fbUsed, fbFree, gpuTemp, power, lastXid, eccSBE, eccDBE}
)

// Collector holds the latest readings of the GPUs of one or more nodes.
type Collector struct {
	metrics.BaseStableCollector

	mu    sync.Mutex
	nodes map[string][]GPU
}

var _ metrics.StableCollector = &Collector{}

// NewCollector makes an empty collector.
func NewCollector() *Collector { return &Collector{nodes: map[string][]GPU{}} }

// Set replaces node's readings.
func (c *Collector) Set(node string, gpus []GPU) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[node] = slices.Clone(gpus)
}

// Forget drops node's readings (its agent stopped).
func (c *Collector) Forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, node)
}

// DescribeWithStability describes every series.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range everyDescs {
		ch <- d
	}
}

// CollectWithStability builds the series from the latest readings; a reading the GPU does not
// support has no series, as in dcgm-exporter.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	nodes := maps.Clone(c.nodes)
	c.mu.Unlock()
	for _, node := range slices.Sorted(maps.Keys(nodes)) {
		for _, g := range nodes[node] {
			lv := []string{strconv.Itoa(g.Index), g.UUID, g.PCIBusID, "nvidia" + strconv.Itoa(g.Index), g.Model, node}
			gauge := func(d *metrics.Desc, v float64) { ch <- metrics.NewLazyConstMetric(d, metrics.GaugeValue, v, lv...) }
			counter := func(d *metrics.Desc, v float64) { ch <- metrics.NewLazyConstMetric(d, metrics.CounterValue, v, lv...) }
			t := &g.Telemetry
			if t.UtilizationPercent != nil {
				gauge(gpuUtil, float64(*t.UtilizationPercent))
			}
			if t.MemoryUtilizationPercent != nil {
				gauge(memUtil, float64(*t.MemoryUtilizationPercent))
			}
			if t.MemoryUsedMiB != nil {
				gauge(fbUsed, float64(*t.MemoryUsedMiB))
				if t.MemoryTotalMiB != nil {
					gauge(fbFree, float64(*t.MemoryTotalMiB-*t.MemoryUsedMiB))
				}
			}
			if t.TemperatureCelsius != nil {
				gauge(gpuTemp, float64(*t.TemperatureCelsius))
			}
			if t.PowerMilliwatts != nil {
				gauge(power, float64(*t.PowerMilliwatts)/1000)
			}
			gauge(lastXid, float64(g.LastXid))
			if t.ECCCorrected != nil {
				counter(eccSBE, float64(*t.ECCCorrected))
			}
			if t.ECCUncorrected != nil {
				counter(eccDBE, float64(*t.ECCUncorrected))
			}
		}
	}
}

// Default is the collector the agent command registers.
var Default = NewCollector()

var once sync.Once

// Register registers Default in the legacy registry that the agent's /metrics serves; later
// calls do nothing.
func Register() {
	once.Do(func() { legacyregistry.CustomMustRegister(Default) })
}
