package claims

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// GPULease is what a GPU lease says: the lock on GPU GPU of node Node (the lease named
// apiv1.LeaseName(Node, GPU)), held by the pods Holders. Its labels carry the node and the GPU
// (apiv1.LabelLeaseNode, apiv1.LabelLeaseGPU) so that the scheduler, the agent and kubectl gpu
// can select a node's leases; its holderIdentity is one pod UID, or several comma-separated
// when the GPU is Shared (apiv1.LabelLeaseShared).
//
// A MIG device's lease (apiv1.MIGLeaseName) is read here too: it carries the GPU label of the
// GPU the device is on and apiv1.LabelLeaseMIGSlot, and MIG is set. Its one holder holds the
// device, not the GPU whole.
type GPULease struct {
	Node   string
	GPU    int
	Shared bool
	// MIG is set on a MIG device's lease: the device's slot on GPU.
	MIG     bool
	Slot    int
	Holders []types.UID
	// Shares are a Shared lease's holders' shares (apiv1.AnnotationLeaseShares); a holder
	// missing from it stated none, or was written by a scheduler before shares. Unreadable
	// entries count as none.
	Shares map[types.UID]apiv1.ResolvedShare
}

// Annotations on a GPU lease that name its pod even when the name is too long for a label
// (apiv1.LabelPodName).
const (
	AnnotationLeasePodNamespace = apiv1.GroupName + "/pod-namespace"
	AnnotationLeasePodName      = apiv1.GroupName + "/pod-name"
)

// NewGPULease is the lease that locks GPU id of node for pod, acquired at now, in namespace:
// named apiv1.LeaseName(node, id), labelled with the node, the GPU and the pod (the pod's UID
// only when the GPU is not shared: a Shared lease names its holders in holderIdentity alone),
// held by the pod's UID. It fails when the node's name can be no label value, as the lease
// could not be listed by node.
func NewGPULease(namespace string, pod *corev1.Pod, node string, id int, shared bool, now time.Time) (*coordinationv1.Lease, error) {
	name, err := apiv1.LeaseName(node, id)
	if err != nil {
		return nil, err
	}
	if len(validation.IsValidLabelValue(node)) > 0 {
		return nil, fmt.Errorf("node name %q cannot be a label value, so GPU leases cannot be listed by node", node)
	}
	acquired := metav1.NewMicroTime(now)
	holder := string(pod.UID)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				apiv1.LabelLeaseNode:    node,
				apiv1.LabelLeaseGPU:     strconv.Itoa(id),
				apiv1.LabelPodNamespace: pod.Namespace,
			},
			Annotations: map[string]string{
				AnnotationLeasePodNamespace: pod.Namespace,
				AnnotationLeasePodName:      pod.Name,
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &acquired},
	}
	if len(validation.IsValidLabelValue(pod.Name)) == 0 {
		l.Labels[apiv1.LabelPodName] = pod.Name
	}
	if shared {
		l.Labels[apiv1.LabelLeaseShared] = "true"
	} else {
		l.Labels[apiv1.LabelPodUID] = string(pod.UID)
	}
	return l, nil
}

// NewMIGLease is the lease that locks MIG device slot of GPU id of node for pod, acquired at
// now, in namespace: named apiv1.MIGLeaseName(node, id, slot), labelled as NewGPULease labels
// an Exclusive GPU's lease (its GPU label names the GPU the device is on) and with the slot
// (apiv1.LabelLeaseMIGSlot), held by the pod's UID.
func NewMIGLease(namespace string, pod *corev1.Pod, node string, id, slot int, now time.Time) (*coordinationv1.Lease, error) {
	name, err := apiv1.MIGLeaseName(node, id, slot)
	if err != nil {
		return nil, err
	}
	l, err := NewGPULease(namespace, pod, node, id, false, now)
	if err != nil {
		return nil, err
	}
	l.Name = name
	l.Labels[apiv1.LabelLeaseMIGSlot] = strconv.Itoa(slot)
	return l, nil
}

// ParseGPULease reads a GPU lease or a MIG device's lease; ok is false for a lease that is
// none (no node label) or that is malformed: a GPU label that is no ID in 0-apiv1.MaxGPUID, a
// MIG slot label that is no slot in 0-apiv1.MaxMIGSlot, or no holderIdentity. A malformed
// lease must make no component fail, so every reader skips it alike.
func ParseGPULease(l *coordinationv1.Lease) (GPULease, bool) {
	node := l.Labels[apiv1.LabelLeaseNode]
	id, ok := GPUOf(l)
	if node == "" || !ok || l.Spec.HolderIdentity == nil {
		return GPULease{}, false
	}
	out := GPULease{Node: node, GPU: id, Shared: l.Labels[apiv1.LabelLeaseShared] == "true"}
	if s, isMIG := l.Labels[apiv1.LabelLeaseMIGSlot]; isMIG {
		slot, err := strconv.Atoi(s)
		if err != nil || s != strconv.Itoa(slot) || slot < 0 || slot > apiv1.MaxMIGSlot || out.Shared {
			return GPULease{}, false
		}
		out.MIG, out.Slot = true, slot
	}
	if v := l.Annotations[apiv1.AnnotationLeaseShares]; out.Shared && v != "" {
		shares, _ := apiv1.ParseLeaseShares(v)
		out.Shares = make(map[types.UID]apiv1.ResolvedShare, len(shares))
		for uid, s := range shares {
			out.Shares[types.UID(uid)] = s
		}
	}
	// Every GPU lease event of the scheduler's informer comes through here: the holders are
	// cut out of holderIdentity without a slice of strings in between.
	for rest, more := *l.Spec.HolderIdentity, true; more; {
		var h string
		h, rest, more = strings.Cut(rest, ",")
		if h = strings.TrimSpace(h); h != "" {
			out.Holders = append(out.Holders, types.UID(h))
		}
	}
	return out, true
}

// SetLeaseShares writes the shares of a Shared lease's holders into its
// apiv1.AnnotationLeaseShares, in the order of holders (a holder without an entry in shares is
// written 0/0), so that every scheduler joining the GPU sums the same shares.
func SetLeaseShares(l *coordinationv1.Lease, holders []types.UID, shares map[types.UID]apiv1.ResolvedShare) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	hs := make([]string, len(holders))
	byUID := make(map[string]apiv1.ResolvedShare, len(shares))
	for i, h := range holders {
		hs[i] = string(h)
	}
	for uid, s := range shares {
		byUID[string(uid)] = s
	}
	l.Annotations[apiv1.AnnotationLeaseShares] = apiv1.FormatLeaseShares(hs, byUID)
}

// GPUOf reads the GPU ID from a lease's apiv1.LabelLeaseGPU label; ok is false when it is no
// ID in 0-apiv1.MaxGPUID.
func GPUOf(l *coordinationv1.Lease) (int, bool) {
	s := l.Labels[apiv1.LabelLeaseGPU]
	if s == "" || len(s) > len(strconv.Itoa(apiv1.MaxGPUID)) {
		return 0, false
	}
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 || id > apiv1.MaxGPUID {
		return 0, false
	}
	return id, true
}

// ParseHolders splits a GPU lease's holderIdentity: one pod UID, or several comma-separated
// for a Shared GPU. Empty entries and surrounding spaces are dropped.
func ParseHolders(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// IsLiveness reports whether a lease is a node agent's liveness lease (apiv1.LabelAgentLiveness);
// such a lease is never a GPU lease.
func IsLiveness(l *coordinationv1.Lease) bool {
	_, ok := l.Labels[apiv1.LabelAgentLiveness]
	return ok
}

// RenewLiveness makes l say that the agent of node, of the release whose scheduler is release,
// lives at renewed: the label the scheduler selects on (apiv1.LabelAgentLiveness, valued with
// the release), the node as holder and the renewal. It drops the GPU leases' label that a
// lease written elsewhere may carry: the agents' admission policy refuses a liveness lease
// with it, and the GPU lease informers must never see one. l is to be named
// apiv1.AgentLeaseName(node), which ParseLiveness checks against the holder.
func RenewLiveness(l *coordinationv1.Lease, node, release string, renewed time.Time) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[apiv1.LabelAgentLiveness] = release
	delete(l.Labels, apiv1.LabelLeaseNode)
	l.Spec.HolderIdentity = &node
	l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
}

// ParseLiveness reads a node agent's liveness lease (apiv1.AgentLeaseName): the node whose
// agent holds it and when the agent last renewed it. obj may be a cache tombstone. For what is
// no liveness lease at all (another object, no holder, a name not ending in -agent) node is
// empty and err nil. A lease whose holder is not the node its name says is no sign of life of
// any node: node is empty and err says why. The agents' admission policy binds each agent to
// the lease named after its own node; the holder is checked here so that one node's agent
// cannot keep another node alive through it.
func ParseLiveness(obj any) (node string, renewed time.Time, err error) {
	if t, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		obj = t.Obj
	}
	l, isLease := obj.(*coordinationv1.Lease)
	if !isLease || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", time.Time{}, nil
	}
	if !strings.HasSuffix(l.Name, "-agent") {
		return "", time.Time{}, nil // not a liveness lease's name (apiv1.AgentLeaseName)
	}
	holder := *l.Spec.HolderIdentity
	if want, err := apiv1.AgentLeaseName(holder); err != nil || want != l.Name {
		return "", time.Time{}, fmt.Errorf("liveness lease %s/%s is held by %q, which is not the node its name says; it is ignored", l.Namespace, l.Name, holder)
	}
	if l.Spec.RenewTime != nil {
		renewed = l.Spec.RenewTime.Time
	}
	return holder, renewed, nil
}
