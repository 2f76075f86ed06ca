package agent

import (
	"context"
	"math"

	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent/telemetry"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// readTelemetry reads every GPU's utilisation, memory, temperature, power and ECC counters. A
// GPU that does not answer has no reading (its health says why); reading never changes health:
// the probe and the events own that.
func (a *Agent) readTelemetry(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, d := range a.session.devices {
		t, err := d.Telemetry()
		if err != nil {
			if _, had := a.readings[d.Index()]; had {
				logger.V(2).Info("Reading GPU telemetry failed", "gpu", d.Index(), "err", err)
			}
			delete(a.readings, d.Index())
			continue
		}
		a.readings[d.Index()] = t
	}
	a.readAt = a.cfg.Clock.Now()
	a.nextTelemetry = a.readAt.Add(a.cfg.TelemetryInterval)
	a.exportTelemetry()
}

// addTelemetry copies GPU d's latest reading and Xid count into its status.
func (a *Agent) addTelemetry(d *apiv1.Device) {
	if x, ok := a.xids[int(d.ID)]; ok {
		d.XidErrors, d.LastXid = x.count, x.last
	}
	t, ok := a.readings[int(d.ID)]
	if !ok {
		return
	}
	d.UtilizationPercent = int32Of(t.UtilizationPercent)
	d.MemoryUtilizationPercent = int32Of(t.MemoryUtilizationPercent)
	d.TemperatureCelsius = int32Of(t.TemperatureCelsius)
	if t.MemoryUsedMiB != nil {
		d.MemoryUsedMiB = new(*t.MemoryUsedMiB)
	}
	if t.PowerMilliwatts != nil {
		w := int32(min(math.Round(float64(*t.PowerMilliwatts)/1000), math.MaxInt32))
		d.PowerWatts = &w
	}
	if t.ECCCorrected != nil {
		d.ECCCorrectedErrors = new(*t.ECCCorrected)
	}
	if t.ECCUncorrected != nil {
		d.ECCUncorrectedErrors = new(*t.ECCUncorrected)
	}
}

func int32Of(p *int) *int32 {
	if p == nil {
		return nil
	}
	v := int32(max(math.MinInt32, min(*p, math.MaxInt32)))
	return &v
}

// exportTelemetry hands the latest readings to the Prometheus collector, if any.
func (a *Agent) exportTelemetry() {
	c := a.cfg.Telemetry
	if c == nil {
		return
	}
	gpus := make([]telemetry.GPU, 0, len(a.inventory))
	for _, d := range a.inventory {
		t, ok := a.readings[d.Index]
		if !ok {
			continue
		}
		x := a.xids[d.Index]
		gpus = append(gpus, telemetry.GPU{
			Index: d.Index, UUID: d.UUID, PCIBusID: d.PCIBusID, Model: d.Product,
			Telemetry: t, LastXid: x.last,
		})
	}
	c.Set(a.cfg.NodeName, gpus)
}
