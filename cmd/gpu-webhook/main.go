// Command gpu-webhook is the gpu-scheduler admission webhook: it points every container of a GPU
// pod at the GPUs the scheduler allocates, and refuses allocation annotations written by anyone
// but the scheduler. "gpu-webhook render" prints the webhook configurations that register it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/metricsauth"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/certrotation"
	"github.com/gpu-scheduler/gpu-scheduler/webhook/manifests"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// serveOptions are the flags of the server.
type serveOptions struct {
	cfg          webhook.Config
	envMode      string
	resourceName string
	kubeconfig   string
	apiQPS       float32
	apiBurst     int
	rotation     rotationFlags
}

// rotationFlags turn on the in-process certificate rotator (webhook/certrotation).
type rotationFlags struct {
	secret, service string
	injectInto      []string
	opts            certrotation.Options
}

// options checks the flags and returns the rotator's options; ok is false when rotation is off.
func (r *rotationFlags) options(certFile string) (opts certrotation.Options, ok bool, err error) {
	if r.secret == "" {
		if r.service != "" || len(r.injectInto) > 0 {
			return opts, false, errors.New("--cert-service and --inject-ca-into need --cert-secret")
		}
		return opts, false, nil
	}
	opts = r.opts
	if opts.Secret, err = namespacedName("--cert-secret", r.secret); err != nil {
		return opts, false, err
	}
	if opts.Service, err = namespacedName("--cert-service", r.service); err != nil {
		return opts, false, err
	}
	opts.Mutating, opts.Validating = r.injectInto, r.injectInto
	opts.CertFile = certFile
	if err := opts.Validate(); err != nil {
		return opts, false, fmt.Errorf("certificate rotation: %w", err)
	}
	return opts, true, nil
}

func namespacedName(flag, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s=%q: want namespace/name", flag, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

func newServeOptions() *serveOptions {
	cfg := webhook.DefaultConfig()
	cfg.CertFile = "/etc/gpu-webhook/tls/tls.crt"
	cfg.KeyFile = "/etc/gpu-webhook/tls/tls.key"
	return &serveOptions{cfg: cfg, envMode: string(cfg.EnvMode), apiQPS: webhook.DefaultAPIQPS, apiBurst: webhook.DefaultAPIBurst}
}

func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.cfg.Addr, "listen-address", o.cfg.Addr, "host:port the HTTPS server listens on (/mutate, /validate, /healthz, /readyz, /metrics).")
	fs.StringVar(&o.cfg.CertFile, "tls-cert-file", o.cfg.CertFile, "PEM serving certificate; re-read when it changes (a rotated Secret needs no restart).")
	fs.StringVar(&o.cfg.KeyFile, "tls-private-key-file", o.cfg.KeyFile, "PEM key of --tls-cert-file.")
	fs.StringVar(&o.envMode, "visible-devices-env", o.envMode, "Variables pointed at the allocated GPU IDs: cuda (CUDA_VISIBLE_DEVICES), nvidia (NVIDIA_VISIBLE_DEVICES), both, or none (with the device plugin, which hands them over). See docs/webhook.md for which one fits your nodes.")
	fs.StringVar(&o.resourceName, "resource-name", "", "GPU resource the agents' device plugin serves (e.g. nvidia.com/gpu): added to every claim pod's first container from its GpuClaim; pods that set the visible-devices variables or mount /dev/nvidia* are refused. Empty: off. See docs/node.md.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig for the API calls: TokenReview and SubjectAccessReview of /metrics callers, and reading GpuClaims with --resource-name; empty means in-cluster.")
	fs.StringSliceVar(&o.cfg.Scheduler.Users, "scheduler-users", o.cfg.Scheduler.Users, "User names that may write the gpu.scheduling/allocated and gpu.scheduling/gpu-ids annotations (the scheduler's service account).")
	fs.StringSliceVar(&o.cfg.Scheduler.Groups, "scheduler-groups", o.cfg.Scheduler.Groups, "Groups whose members may write the allocation annotations.")
	fs.StringVar(&o.cfg.SchedulerName, "scheduler-name", gpuv1.SchedulerName, schedulerNameUsage)
	fs.Float32Var(&o.apiQPS, "kube-api-qps", o.apiQPS, "Queries per second of the webhook's own API calls (cache misses when reading GpuClaims, namespaces and pods; /metrics reviews).")
	fs.IntVar(&o.apiBurst, "kube-api-burst", o.apiBurst, "Burst of the webhook's own API calls.")
	fs.StringSliceVar(&o.cfg.SiblingSchedulerNames, "sibling-scheduler-names", nil, "schedulerNames of other gpu-scheduler releases in the cluster: Bindings of their pods are left to their own allocation guards instead of refused (docs/install.md#two-releases). The webhook then watches those schedulers' pods.")
	fs.BoolVar(&o.cfg.RefuseOtherSchedulers, "refuse-other-schedulers", false, "Refuse pods that name a GpuClaim or GpuClaimTemplate but ask for a scheduler other than --scheduler-name, --sibling-scheduler-names or the default one (pods of the default scheduler always get --scheduler-name). The chart turns it on.")
	fs.StringVar(&o.cfg.ClientCAFile, "client-ca-file", "", "PEM CA bundle: only callers with a client certificate it signed (the kube-apiserver, through its AdmissionConfiguration) may call /mutate and /validate; others get 403. Empty: any caller that reaches the port (docs/webhook.md#callers).")
	fs.StringSliceVar(&o.cfg.ClientNames, "client-names", nil, "With --client-ca-file: the client certificate's common name or a DNS name must be one of these. Empty: any certificate of the CA.")
	fs.Int64Var(&o.cfg.MaxRequestBytes, "max-request-bytes", o.cfg.MaxRequestBytes, "Largest AdmissionReview body accepted; larger ones get 413.")
	fs.StringVar(&o.rotation.secret, "cert-secret", "", "namespace/name of a Secret the webhook keeps its own CA and serving certificate in, renewing them before they expire (open-policy-agent's cert-controller); mount it at the folder of --tls-cert-file. Empty: the certificate files are someone else's (cert-manager, a file you made).")
	fs.StringVar(&o.rotation.service, "cert-service", "", "With --cert-secret: namespace/name of the webhook's Service, whose DNS names the certificate is for.")
	fs.StringSliceVar(&o.rotation.injectInto, "inject-ca-into", nil, "With --cert-secret: names of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose webhooks get the CA bundle.")
	fs.DurationVar(&o.rotation.opts.CAValidity, "ca-validity", certrotation.DefaultCAValidity, "With --cert-secret: lifetime of the CA the webhook makes.")
	fs.DurationVar(&o.rotation.opts.CertValidity, "cert-validity", certrotation.DefaultCertValidity, "With --cert-secret: lifetime of the serving certificate.")
	fs.DurationVar(&o.rotation.opts.RenewBefore, "cert-renew-before", certrotation.DefaultRenewBefore, "With --cert-secret: the serving certificate (and the CA) is renewed this long before it ends.")
	fs.DurationVar(&o.cfg.ShutdownGrace, "shutdown-grace-period", o.cfg.ShutdownGrace, "How long in-flight requests may finish after SIGTERM.")
}

// schedulerNameUsage: the flag wins over $SCHEDULER_NAME, which wins over the default.
const schedulerNameUsage = "spec.schedulerName of the pods to mutate (this release's scheduler; default $" + gpuv1.SchedulerNameEnv + ", then gpu-scheduler)."

func newCommand() *cobra.Command {
	o := newServeOptions()
	cmd := &cobra.Command{
		Use:   "gpu-webhook",
		Short: "Admission webhook of the gpu-scheduler: visible-devices injection and the allocation guard",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := webhook.ParseEnvMode(o.envMode)
			if err != nil {
				return err
			}
			o.cfg.EnvMode = mode
			if o.cfg.SchedulerName, err = gpuv1.ResolveSchedulerName(o.cfg.SchedulerName, cmd.Flags().Changed("scheduler-name"), os.Getenv); err != nil {
				return err
			}
			api, err := apiConfig(o.kubeconfig)
			if err != nil {
				return err
			}
			api.QPS, api.Burst = o.apiQPS, o.apiBurst
			if o.cfg.MetricsGuard, err = metricsauth.NewGuard(api, "gpu-webhook"); err != nil {
				return err
			}
			rotation, rotate, err := o.rotation.options(o.cfg.CertFile)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			ctx = klog.NewContext(ctx, klog.Background())
			var rotatorDone <-chan error
			if rotate {
				if rotatorDone, err = startRotation(ctx, api, rotation); err != nil {
					return err
				}
			}
			if o.resourceName != "" || len(o.cfg.SiblingSchedulerNames) > 0 {
				reader, err := webhook.NewClusterReader(api, webhook.ReaderOptions{QPS: o.apiQPS, Burst: o.apiBurst,
					Claims: o.resourceName != "", SiblingSchedulerNames: o.cfg.SiblingSchedulerNames})
				if err != nil {
					return err
				}
				if err := reader.Start(ctx, time.Minute); err != nil {
					return err
				}
				if o.resourceName != "" {
					o.cfg.Resource = webhook.ResourceConfig{Name: corev1.ResourceName(o.resourceName), Count: reader.Count, Request: reader.Request, ForbidsPrivileged: reader.ForbidsPrivileged}
				}
				if len(o.cfg.SiblingSchedulerNames) > 0 {
					o.cfg.SiblingPod = reader.SiblingPod
				}
			}
			s, err := webhook.New(o.cfg)
			if err != nil {
				return err
			}
			if rotatorDone == nil {
				return s.Run(ctx)
			}
			// A rotator that stops leaves a certificate that nobody renews: end the process so
			// that the kubelet restarts it.
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			go func() {
				if err := <-rotatorDone; err != nil {
					cancel(err)
				}
			}()
			if err := s.Run(ctx); err != nil {
				return err
			}
			return context.Cause(ctx)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.AddCommand(newRenderCommand())
	return cmd
}

// startRotation starts the certificate rotator and waits until the certificate it keeps is
// mounted at the certificate file and its CA is in the webhook configurations: the server loads
// the files when it starts.
func startRotation(ctx context.Context, api *rest.Config, opts certrotation.Options) (<-chan error, error) {
	ready, done, err := certrotation.Start(ctx, api, opts)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Waiting for the rotated certificate to be mounted", "file", opts.CertFile)
	select {
	case <-ready:
		return done, nil
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("certificate rotator stopped before the certificate was ready: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// apiConfig is the client configuration of the webhook's own API calls: the kubeconfig when
// given, else the pod's service account.
func apiConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (pass --kubeconfig outside a cluster; /metrics callers are checked with the apiserver): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

func newRenderCommand() *cobra.Command {
	var (
		opts         manifests.Options
		caFile       string
		svcName      string
		svcNamespace string
		svcPort      int32
	)
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print the MutatingWebhookConfiguration and ValidatingWebhookConfiguration as YAML",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.SchedulerName, err = gpuv1.ResolveSchedulerName(opts.SchedulerName, cmd.Flags().Changed("scheduler-name"), os.Getenv); err != nil {
				return err
			}
			ca, err := os.ReadFile(caFile)
			if err != nil {
				return fmt.Errorf("read CA bundle: %w", err)
			}
			opts.CABundle = ca
			if svcName != "" {
				ns := svcNamespace
				if ns == "" {
					ns = opts.Namespace
				}
				opts.Service = &manifests.ServiceRef{Namespace: ns, Name: svcName, Port: svcPort}
			}
			out, err := manifests.RenderYAML(opts)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Name, "name", manifests.DefaultName, "Name of both configuration objects.")
	fs.StringVar(&opts.Namespace, "namespace", "gpu-scheduler", "Namespace the webhook runs in; excluded from the webhooks together with kube-system.")
	fs.StringVar(&caFile, "ca-bundle-file", "", "PEM CA that signed the webhook's serving certificate.")
	fs.StringVar(&opts.URL, "url", "", "Base URL (https://host:port) of a webhook outside the cluster; exclusive with --service-name.")
	fs.StringVar(&svcName, "service-name", "", "Service in front of the webhook.")
	fs.StringVar(&svcNamespace, "service-namespace", "", "Namespace of the Service; --namespace when empty.")
	fs.Int32Var(&svcPort, "service-port", 443, "Port of the Service.")
	fs.Int32Var(&opts.TimeoutSeconds, "timeout-seconds", manifests.DefaultTimeoutSeconds, "Per-call timeout the apiserver applies.")
	fs.StringVar(&opts.SchedulerName, "scheduler-name", gpuv1.SchedulerName, schedulerNameUsage)
	fs.StringSliceVar(&opts.ExcludeNamespaces, "exclude-namespaces", nil, "More namespaces the webhooks skip.")
	fs.BoolVar(&opts.JobResource, "job-resource", false, "Also send the creation of batch/v1 Jobs whose pod template names a claim or a claim template, so that the webhook writes the GPU request into the template (for quota managers such as Kueue; docs/kueue.md). Pass it when the server runs with --resource-name.")
	// The server's flags, with the server's defaults: pass the values the server runs with. The
	// scheduler's Bindings are not sent to the webhook, which would allow them.
	scheduler := webhook.DefaultConfig().Scheduler
	fs.StringSliceVar(&opts.Scheduler.Users, "scheduler-users", scheduler.Users, "The webhook server's --scheduler-users: their Bindings are not sent to the webhook.")
	fs.StringSliceVar(&opts.Scheduler.Groups, "scheduler-groups", scheduler.Groups, "The webhook server's --scheduler-groups: their members' Bindings are not sent to the webhook.")
	_ = cmd.MarkFlagRequired("ca-bundle-file")
	return cmd
}
