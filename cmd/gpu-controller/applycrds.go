package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/csaupgrade"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	chart "github.com/gpu-scheduler/gpu-scheduler/charts/gpu-scheduler"
)

// crdFieldManager owns every field of our CRDs once apply-crds has run.
const crdFieldManager = "gpu-scheduler-crds"

// previousCRDManagers wrote our CRDs with client-side operations before apply-crds existed: Helm
// (crds/ on install) and kubectl's create, replace and client-side apply. Their fields move to
// crdFieldManager before the apply, so that a field a newer CRD drops is dropped: server-side
// apply removes only the fields its own manager owned.
var previousCRDManagers = sets.New("helm", "kubectl-create", "kubectl-replace", "kubectl-client-side-apply", "kubectl-edit")

// applyCRDsCommand is `gpu-controller apply-crds`: it server-side-applies the CRDs built into
// the binary (the chart's crds/) with force, as the field manager gpu-scheduler-crds, and waits
// until the API server serves each. The chart runs it as a pre-install/pre-upgrade hook Job,
// since Helm never upgrades crds/; the request carries the 600 KB GpuWorkload CRD without the
// last-applied annotation of a client-side apply, which cannot hold it.
func applyCRDsCommand(args []string) error {
	var kubeconfig string
	var timeout time.Duration
	fs := pflag.NewFlagSet("gpu-controller apply-crds", pflag.ContinueOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty: in-cluster configuration (or $KUBECONFIG).")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "How long to wait for the API server to serve the applied CRDs.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("apply-crds takes no arguments, got %q", fs.Args())
	}
	cfg, err := subcommandConfig(kubeconfig, "gpu-controller-apply-crds")
	if err != nil {
		return err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), timeout)
	defer cancel()
	return applyCRDs(ctx, client, chart.CRDs)
}

// applyCRDs applies every crds/*.yaml of files and waits until each is Established.
func applyCRDs(ctx context.Context, client apiextensionsclient.Interface, files fs.FS) error {
	logger := klog.FromContext(ctx)
	names, err := fs.Glob(files, "crds/*.yaml")
	if err != nil {
		return fmt.Errorf("listing the CRDs: %w", err)
	}
	if len(names) == 0 {
		return errors.New("no CRDs built into this binary (crds/*.yaml)")
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	var applied []string
	for _, file := range names {
		data, err := fs.ReadFile(files, file)
		if err != nil {
			return fmt.Errorf("reading %s: %w", file, err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return fmt.Errorf("%s: %w", path.Base(file), err)
		}
		if crd.Kind != "CustomResourceDefinition" || crd.Name == "" {
			return fmt.Errorf("%s is no named CustomResourceDefinition (kind %q, name %q)", path.Base(file), crd.Kind, crd.Name)
		}
		if err := takeOverFields(ctx, client, crd.Name); err != nil {
			return err
		}
		// The file as it is is the apply configuration (YAML is accepted for apply patches).
		if _, err := crds.Patch(ctx, crd.Name, types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: crdFieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
		logger.Info("Applied CRD", "crd", crd.Name, "fieldManager", crdFieldManager)
		applied = append(applied, crd.Name)
	}
	for _, name := range applied {
		var last string
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
				if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
					last = c.Message
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established (%s): %w", name, last, err)
		}
	}
	logger.Info("CRDs served", "count", len(applied))
	return nil
}

// takeOverFields moves the fields that client-side writers (previousCRDManagers) own in the
// CRD to crdFieldManager. A CRD that does not exist yet has none.
func takeOverFields(ctx context.Context, client apiextensionsclient.Interface, name string) error {
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	crd, err := crds.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading CRD %s: %w", name, err)
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(crd, previousCRDManagers, crdFieldManager)
	if err != nil {
		return fmt.Errorf("moving the fields of CRD %s to %s: %w", name, crdFieldManager, err)
	}
	if patch == nil {
		return nil
	}
	if _, err := crds.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("moving the fields of CRD %s to %s: %w", name, crdFieldManager, err)
	}
	klog.FromContext(ctx).V(2).Info("Took over the fields of earlier client-side writers", "crd", name)
	return nil
}
