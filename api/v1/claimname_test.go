package v1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestClaimNameForPod(t *testing.T) {
	long := strings.Repeat("p", 60)
	tests := []struct {
		pod, template string
		want          string
		wantErr       string
	}{
		{pod: "train-0", template: "a100x8", want: "train-0-a100x8"},
		{pod: "web-7d9f-x2k", template: "t", want: "web-7d9f-x2k-t"},
		{pod: "", template: "t", wantErr: "pod name is empty"},
		{pod: "p", template: "", wantErr: "template name is empty"},
	}
	for _, tt := range tests {
		got, err := ClaimNameForPod(tt.pod, tt.template)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ClaimNameForPod(%q, %q) error = %v, want one containing %q", tt.pod, tt.template, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ClaimNameForPod(%q, %q) = %q, %v; want %q", tt.pod, tt.template, got, err, tt.want)
		}
	}

	// Long names are shortened to 63 characters, stay valid, and differ for different pods.
	a, err := ClaimNameForPod(long+"-a", "template")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ClaimNameForPod(long+"-b", "template")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two long pod names got the same claim name %q", a)
	}
	for _, n := range []string{a, b} {
		if len(n) > 63 {
			t.Errorf("claim name %q is %d characters, want at most 63", n, len(n))
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			t.Errorf("claim name %q is not a valid label: %v", n, errs)
		}
	}
	again, _ := ClaimNameForPod(long+"-a", "template")
	if again != a {
		t.Errorf("claim name is not deterministic: %q then %q", a, again)
	}
	// A cut that lands on '-' is trimmed so the name never has "--".
	c, err := ClaimNameForPod(strings.Repeat("x", 51)+"-yyyyyyyyyy", "t")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(c, "--") {
		t.Errorf("claim name %q contains --", c)
	}
}
