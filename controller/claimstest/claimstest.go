// Package claimstest holds what the controllers' tests share about reading GpuClaims.
package claimstest

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// MetadataOnly fails the test when a reconciler reads a GpuClaim as a whole object. The
// controllers read claims as metav1.PartialObjectMetadata from the manager's metadata-only
// cache; a whole-object read through the manager's cache would start a full GpuClaim informer
// beside it, and every claim in the cluster would be decoded and kept twice.
func MetadataOnly(t *testing.T) interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*apiv1.GpuClaim); ok {
				t.Errorf("the reconciler read GpuClaim %s as a whole object; it reads claims as metav1.PartialObjectMetadata", key)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*apiv1.GpuClaimList); ok {
				t.Errorf("the reconciler listed GpuClaims as whole objects; it reads claims as metav1.PartialObjectMetadata")
			}
			return c.List(ctx, list, opts...)
		},
	}
}
