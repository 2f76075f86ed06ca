package allocator

import "fmt"

// Builder assembles a node's GPUs so that test fixtures read as data:
//
//	NewBuilder("node-a").Island("nvlink-group-0", 600, 0, 1, 2, 3).Island("nvlink-group-1", 64, 4, 5, 6, 7).Unhealthy(7).Node()
type Builder struct {
	n   Node
	err error
}

// NewBuilder starts a node with no GPUs.
func NewBuilder(name string) *Builder {
	return &Builder{n: Node{Name: name}}
}

// Island adds healthy free GPUs with the given IDs to one island at the given bandwidth.
func (b *Builder) Island(name string, bandwidthGBps int, ids ...int) *Builder {
	for _, id := range ids {
		if _, dup := b.n.GPU(id); dup && b.err == nil {
			b.err = fmt.Errorf("builder for node %q: GPU %d added twice", b.n.Name, id)
		}
		b.n.GPUs = append(b.n.GPUs, GPU{ID: id, Island: name, BandwidthGBps: bandwidthGBps, UtilizationPercent: -1})
		b.n.SortGPUs()
	}
	return b
}

// Standalone adds GPUs that share no fast interconnect with any other GPU.
func (b *Builder) Standalone(bandwidthGBps int, ids ...int) *Builder {
	return b.Island("", bandwidthGBps, ids...)
}

func (b *Builder) gpu(id int) *GPU {
	g, ok := b.n.GPU(id)
	if !ok {
		if b.err == nil {
			b.err = fmt.Errorf("builder for node %q: no GPU %d", b.n.Name, id)
		}
		return &GPU{}
	}
	return g
}

// Unhealthy marks GPUs Unhealthy.
func (b *Builder) Unhealthy(ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).Health = Unhealthy
	}
	return b
}

// Unknown marks GPUs Unknown.
func (b *Builder) Unknown(ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).Health = Unknown
	}
	return b
}

// HeldBy marks GPUs as held exclusively by a pod.
func (b *Builder) HeldBy(pod string, ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).ExclusiveHolder = pod
	}
	return b
}

// SharedBy adds one Shared user to each GPU.
func (b *Builder) SharedBy(ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).SharedHolders++
	}
	return b
}

// Utilization sets the reported utilization of GPUs.
func (b *Builder) Utilization(percent int, ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).UtilizationPercent = percent
	}
	return b
}

// MemoryUsed sets the reported share of memory in use of GPUs.
func (b *Builder) MemoryUsed(percent int, ids ...int) *Builder {
	for _, id := range ids {
		b.gpu(id).MemoryUsedPercent = percent
	}
	return b
}

// Node returns the node, or panics on a builder mistake; builders are for fixtures, whose
// mistakes are programming errors.
func (b *Builder) Node() *Node {
	if b.err != nil {
		panic(b.err)
	}
	n := b.n.Clone()
	return n
}

// DGX is an NVSwitch box: every GPU on one switch fabric, one island.
func DGX(name string, gpus, bandwidthGBps int) *Builder {
	return NewBuilder(name).Island("nvswitch", bandwidthGBps, seq(0, gpus)...)
}

// TwoIslands is the API reference's box: GPUs 0..a-1 in an island at 600 GB/s, the next b in
// an island at 64 GB/s.
func TwoIslands(name string, a, b int) *Builder {
	return NewBuilder(name).
		Island("nvlink-group-0", 600, seq(0, a)...).
		Island("nvlink-group-1", 64, seq(a, b)...)
}

// NVLinkPairs is a PCIe box whose GPUs are bridged in pairs (0-1, 2-3, ...).
func NVLinkPairs(name string, gpus, bandwidthGBps int) *Builder {
	b := NewBuilder(name)
	for i := 0; i+1 < gpus; i += 2 {
		b.Island(fmt.Sprintf("nvlink-pair-%d", i/2), bandwidthGBps, i, i+1)
	}
	if gpus%2 == 1 {
		b.Standalone(0, gpus-1)
	}
	return b
}

func seq(from, n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = from + i
	}
	return ids
}
