package v1

import (
	"fmt"

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
