// Package attacks holds the attack corpus: one manifest per way a pod could reach a GPU it does
// not hold, each with the refusal it must get, and legitimate pods that must be admitted. The
// integration test (go test -tags integration ./test/attacks/) applies them to a real
// kube-apiserver with the gpu-webhook and the chart's admission policies in the device-plugin
// mode. README.md says how to add a way in.
package attacks
