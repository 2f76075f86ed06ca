package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates (or replaces) the CustomResourceDefinitions in the given YAML files or
// directories of *.yaml files, and waits until each is Established, i.e. served.
func (c *Cluster) InstallCRDs(ctx context.Context, paths ...string) error {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("reading CRDs from %s: %w", p, err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(p, "*.yaml"))
		if err != nil {
			return fmt.Errorf("listing CRDs in %s: %w", p, err)
		}
		sort.Strings(matches)
		files = append(files, matches...)
	}
	dc, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return fmt.Errorf("creating dynamic client: %w", err)
	}
	crds := dc.Resource(crdGVR)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading CRD %s: %w", f, err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &obj.Object); err != nil {
			return fmt.Errorf("decoding CRD %s: %w", f, err)
		}
		if obj.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("%s holds a %q, not a CustomResourceDefinition", f, obj.GetKind())
		}
		_, err = crds.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = crds.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = crds.Update(ctx, obj, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s from %s: %w", obj.GetName(), f, err)
		}
		names = append(names, obj.GetName())
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, c.cfg.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
			cur, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s to be established: %w", name, err)
		}
	}
	return nil
}
