package mock_test

import (
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
)

func TestParseFault(t *testing.T) {
	for in, want := range map[string]mock.Fault{
		"xid79": {Kind: mock.FaultXid, Xid: 79}, "xid13": {Kind: mock.FaultXid, Xid: 13},
		"dbe": {Kind: mock.FaultDoubleBitECC}, "lost": {Kind: mock.FaultLost},
		"remap-failure": {Kind: mock.FaultRemapFailure}, "recover": {Kind: mock.FaultRecover},
	} {
		got, err := mock.ParseFault(in)
		if err != nil || got != want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, in := range []string{"", "xid", "xid-1", "xid 79", "xid123456", "XID79", "boom"} {
		if _, err := mock.ParseFault(in); err == nil {
			t.Errorf("ParseFault(%q) succeeded", in)
		}
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"xid79", "dbe", "lost", "recover", "xid", "xid99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := mock.ParseFault(s)
		if err != nil {
			return
		}
		again, err := mock.ParseFault(fault.String())
		if err != nil || again != fault {
			t.Fatalf("ParseFault(%q) = %+v, which does not round-trip: %+v, %v", s, fault, again, err)
		}
	})
}

func TestNewUnknown(t *testing.T) {
	if _, err := mock.New("dgx-z9000"); err == nil {
		t.Error("New of an unknown topology succeeded")
	}
	srv, _ := mock.New(mock.PCIeOnly)
	if err := srv.Inject(8, mock.Fault{Kind: mock.FaultLost}); err == nil {
		t.Error("Inject into GPU 8 of an 8-GPU server succeeded")
	}
}
