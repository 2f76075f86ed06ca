package gpuclaim

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestOwnConnection: client-go hands equal configurations one shared transport (one HTTP/2
// connection); the plugin's configuration gets one of its own, and two plugin clients do not
// share theirs either.
func TestOwnConnection(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	shared, err := rest.TransportFor(base)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rest.TransportFor(rest.CopyConfig(base))
	if err != nil {
		t.Fatal(err)
	}
	if shared != again {
		t.Fatal("precondition: client-go shares the transport of equal configurations")
	}
	own, err := rest.TransportFor(ownConnection(base))
	if err != nil {
		t.Fatal(err)
	}
	other, err := rest.TransportFor(ownConnection(base))
	if err != nil {
		t.Fatal(err)
	}
	if own == shared || own == other {
		t.Error("the plugin's client shares a transport (and its connection) with another client")
	}
	if base.Dial != nil {
		t.Error("ownConnection changed the scheduler's own configuration")
	}
}
