package v1

import (
	"strings"
	"testing"
)

func TestResolveSchedulerName(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == SchedulerNameEnv {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name    string
		flag    string
		flagSet bool
		env     string
		want    string
		wantErr string
	}{
		{name: "default", want: SchedulerName},
		{name: "env over default", env: "canary", want: "canary"},
		{name: "flag over env", flag: "team-b", flagSet: true, env: "canary", want: "team-b"},
		{name: "flag over default", flag: "team-b", flagSet: true, want: "team-b"},
		{name: "empty flag is an error, not the env", flag: "", flagSet: true, env: "canary", wantErr: "--scheduler-name"},
		{name: "bad env named", env: "Bad_Name", wantErr: "$SCHEDULER_NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveSchedulerName(tc.flag, tc.flagSet, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want an error naming %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
