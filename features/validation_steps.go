package features

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cucumber/godog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about bad input: what the API server refuses and what the scheduler reports.
func registerValidationSteps(sc *godog.ScenarioContext) {
	sc.Step(`^the API server refuses these GpuClaims:$`, refusesClaims)
	sc.Step(`^the scheduler fails these GpuClaims:$`, failsClaims)
}

// row is one line of a table with a header row, by column name.
type row map[string]string

// rows reads a table whose first row names the columns, and checks the columns it needs.
func rows(t *godog.Table, need ...string) ([]row, error) {
	if len(t.Rows) < 2 {
		return nil, errors.New("the table needs a header row and at least one row")
	}
	var header []string
	for _, c := range t.Rows[0].Cells {
		header = append(header, c.Value)
	}
	for _, n := range need {
		found := false
		for _, h := range header {
			found = found || h == n
		}
		if !found {
			return nil, fmt.Errorf("the table has columns %v; it needs %v", header, need)
		}
	}
	var out []row
	for _, r := range t.Rows[1:] {
		m := row{}
		for i, c := range r.Cells {
			m[header[i]] = c.Value
		}
		out = append(out, m)
	}
	return out, nil
}

// claimName makes a claim name from a table's "case" column.
func claimName(i int, c string) string {
	return strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(fmt.Sprintf("bad-%d-%s", i, c)), "-"), "-")
}

// refusesClaims creates each row's GpuClaim exactly as written (through the dynamic client, so
// that no Go type drops or defaults a field) and expects the API server to refuse it as
// Invalid, saying exactly the row's message about the offending field (see invalidCauses).
// Every row is tried; the step reports every row that disagrees.
func refusesClaims(ctx context.Context, t *godog.Table) error {
	st := state(ctx)
	rs, err := rows(t, "case", "spec", "message")
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(st.suite.restCfg)
	if err != nil {
		return err
	}
	gvr := apiv1.SchemeGroupVersion.WithResource("gpuclaims")
	var problems []string
	for i, r := range rs {
		var spec map[string]any
		if err := yaml.Unmarshal([]byte(r["spec"]), &spec); err != nil {
			return fmt.Errorf("row %q: spec %q: %w", r["case"], r["spec"], err)
		}
		name := claimName(i, r["case"])
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": apiv1.SchemeGroupVersion.String(),
			"kind":       "GpuClaim",
			"metadata":   map[string]any{"name": name, "namespace": st.ns},
			"spec":       spec,
		}}
		_, err := client.Resource(gvr).Namespace(st.ns).Create(ctx, obj, metav1.CreateOptions{})
		want := r["message"]
		switch {
		case err == nil:
			problems = append(problems, fmt.Sprintf("%s: %s was accepted; want %q", r["case"], r["spec"], want))
		case !apierrors.IsInvalid(err):
			problems = append(problems, fmt.Sprintf("%s: %s failed with %v, not as invalid", r["case"], r["spec"], err))
		default:
			if got := invalidCauses(err); got != want {
				problems = append(problems, fmt.Sprintf("%s: %s\n    got  %q\n    want %q\n    (whole error: %v)", r["case"], r["spec"], got, want, err))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d of %d claims were not refused as the table says:\n  %s", len(problems), len(rs), strings.Join(problems, "\n  "))
	}
	return nil
}

// skippedRules is what the apiserver adds when schema errors kept it from evaluating the CEL
// rules; it says nothing about the claim.
const skippedRules = "some validation rules were not checked because the object was invalid"

// invalidCauses renders what an Invalid error says about each field, "field: message" joined
// by "; ", leaving out the note that CEL rules were skipped.
func invalidCauses(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return err.Error()
	}
	var parts []string
	for _, c := range status.Status().Details.Causes {
		if strings.Contains(c.Message, skippedRules) {
			continue
		}
		parts = append(parts, c.Field+": "+c.Message)
	}
	return strings.Join(parts, "; ")
}

// failsClaims creates each row's GpuClaim (which the API server accepts) and a pod that names
// it, and expects the scheduler to mark the claim Failed with exactly the row's message and
// to leave the pod unscheduled with the same reason.
func failsClaims(ctx context.Context, t *godog.Table) error {
	st := state(ctx)
	rs, err := rows(t, "case", "spec", "message")
	if err != nil {
		return err
	}
	for i, r := range rs {
		spec, err := parseClaimSpec(r["spec"])
		if err != nil {
			return fmt.Errorf("row %q: %w", r["case"], err)
		}
		name := claimName(i, r["case"])
		if err := st.claimAndPod(ctx, name, spec, podOptions{}); err != nil {
			return fmt.Errorf("row %q: %w", r["case"], err)
		}
	}
	var problems []string
	for i, r := range rs {
		name := claimName(i, r["case"])
		want := strings.NewReplacer("{namespace}", st.ns, "{name}", name).Replace(r["message"])
		if err := st.waitClaim(ctx, name, apiv1.ClaimFailed, &want); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r["case"], err))
			continue
		}
		if err := podPending(ctx, name, want); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", r["case"], err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d of %d claims were not failed as the table says:\n  %s", len(problems), len(rs), strings.Join(problems, "\n  "))
	}
	return nil
}
