package claimtemplate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpu-scheduler/gpu-scheduler/claims"
)

// The PodGroups a pod's gang can come from. The coscheduling plugin's module is not a
// dependency of this one: its PodGroups are read as unstructured objects, the two fields used
// by name.
var (
	coschedulingPodGroups = schema.GroupVersionResource{Group: claims.GroupCoscheduling, Version: "v1alpha1", Resource: "podgroups"}
	workloadPodGroups     = schema.GroupVersionResource{Group: claims.GroupWorkload, Version: "v1alpha2", Resource: "podgroups"}
)

// maxGangSize is spec.gangSize's Maximum in the GpuClaim CRD.
const maxGangSize = 1024

// errGroupMissing wraps the error of a pod group that does not exist (or whose API the cluster
// does not serve): the pod waits for it.
var errGroupMissing = errors.New("no such pod group")

// errGroupInvalid wraps the error of a pod group whose gang cannot be read.
var errGroupInvalid = errors.New("pod group unusable")

// groupGang is what a pod group makes of its pods' claims.
type groupGang struct {
	// gang is false for a group whose policy schedules its pods one by one (a scheduling.k8s.io
	// PodGroup with the basic policy).
	gang bool
	// size is the gang's spec.gangSize: minMember or minCount.
	size int32
}

// groupReader reads pod groups.
type groupReader interface {
	gangOf(ctx context.Context, namespace string, ref claims.PodGroupRef) (groupGang, error)
}

// dynamicGroups reads pod groups through the dynamic client, from the API server (not a cache:
// one read per member claim made, and no watch of an API the cluster may not serve).
type dynamicGroups struct {
	client dynamic.Interface
}

func (d dynamicGroups) gangOf(ctx context.Context, namespace string, ref claims.PodGroupRef) (groupGang, error) {
	gvr := coschedulingPodGroups
	if ref.Group == claims.GroupWorkload {
		gvr = workloadPodGroups
	}
	obj, err := d.client.Resource(gvr).Namespace(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return groupGang{}, fmt.Errorf("%w: %s PodGroup %s/%s does not exist, or the cluster does not serve that API (%w)",
				errGroupMissing, gvr.GroupVersion(), namespace, ref.Name, err)
		}
		return groupGang{}, fmt.Errorf("reading %s %s/%s (gpu-controller needs get on %s): %w", gvr.GroupVersion(), namespace, ref.Name, gvr.GroupResource(), err)
	}
	return gangOfGroup(ref, obj)
}

// gangOfGroup reads the gang of a pod group object.
func gangOfGroup(ref claims.PodGroupRef, obj *unstructured.Unstructured) (groupGang, error) {
	var path []string
	if ref.Group == claims.GroupWorkload {
		if _, found, _ := unstructured.NestedMap(obj.Object, "spec", "schedulingPolicy", "gang"); !found {
			return groupGang{gang: false}, nil
		}
		path = []string{"spec", "schedulingPolicy", "gang", "minCount"}
	} else {
		path = []string{"spec", "minMember"}
	}
	n, found, err := unstructured.NestedInt64(obj.Object, path...)
	field := "." + strings.Join(path, ".")
	if err != nil {
		return groupGang{}, fmt.Errorf("%w: %s: %s: %w", errGroupInvalid, ref, field, err)
	}
	if !found || n < 1 || n > maxGangSize {
		return groupGang{}, fmt.Errorf("%w: %s has %s %d; a gang of GPU pods has 1 to %d members", errGroupInvalid, ref, field, n, maxGangSize)
	}
	return groupGang{gang: true, size: int32(n)}, nil
}
