// Command golangci-lint is golangci-lint's own command with Kubernetes' logcheck linked in as a
// module plugin. It is what `golangci-lint custom` generates, written out by hand: custom clones
// golangci-lint's repository with git, and our machines reach only the Go module proxy, so the
// pinned module (go.mod) is built instead. The plugin registers itself in its init function;
// .golangci.yml enables it as the custom linter "logcheck".
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	_ "sigs.k8s.io/logtools/logcheck/gclplugin"
)

// version and date are set by hack/build-tools.sh from the pin in go.mod, so that
// `golangci-lint version` names the release this binary was built from.
var (
	version = "unknown"
	date    = "unknown"
)

func main() {
	info := commands.BuildInfo{Version: version, Date: date, Commit: "module proxy", GoVersion: runtime.Version()}
	if err := commands.Execute(info); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}
