package v1

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ResolveSchedulerName is the scheduler name a binary serves: the --scheduler-name flag when it
// was given, else $SCHEDULER_NAME when set, else SchedulerName. getenv is os.Getenv (a parameter
// so tests need not touch the process environment). The name must be a DNS subdomain, as
// pod.spec.schedulerName is; the error names where the bad value came from.
func ResolveSchedulerName(flagValue string, flagSet bool, getenv func(string) string) (string, error) {
	name, from := SchedulerName, "the default"
	if env := getenv(SchedulerNameEnv); env != "" {
		name, from = env, "$"+SchedulerNameEnv
	}
	if flagSet {
		name, from = flagValue, "--scheduler-name"
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("scheduler name %q from %s is not a DNS subdomain: %v", name, from, errs)
	}
	return name, nil
}

// ReleaseFor is the scheduler name of the release whose controllers look after an object that
// asks for schedulerName (a pod's spec.schedulerName, a GpuWorkload's template's): that name,
// or SchedulerName, the default release, when it names none or the cluster's default-scheduler.
// Two releases side by side thus never both act on one GpuWorkload or one templated pod.
func ReleaseFor(schedulerName string) string {
	if schedulerName == "" || schedulerName == corev1.DefaultSchedulerName {
		return SchedulerName
	}
	return schedulerName
}
