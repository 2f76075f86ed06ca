// Package features holds the acceptance scenarios of gpu-scheduler: Gherkin feature files
// (*.feature) and their Go step definitions, run by godog against a real control plane from
// sim/cluster with the production gpu-scheduler, gpu-webhook and node agent (over the mock
// NVML topologies of agent/mock).
//
// The suite shares one control plane between scenarios. A scenario is isolated by its own
// namespace and its own nodes: every node a scenario creates carries the label
// acceptance.gpu.scheduling/scenario=<id>, and every GpuClaim a step creates gets that label
// added to its node selector, so a claim only ever sees the nodes of its own scenario.
//
// The step definitions are split by area (topology, workload, lease, health, lifecycle,
// webhook, validation); per-scenario state lives in the context.Context godog threads through
// the steps, and an After hook cleans up whether the scenario passed or not.
//
// Run it with "make test-acceptance", or
//
//	go test -tags acceptance -count=1 ./features/ -godog.tags=@lease
package features
