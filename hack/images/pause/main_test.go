package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestMain runs main when the test binary is started as the pause process by a test below.
func TestMain(m *testing.M) {
	if os.Getenv("PAUSE_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// The sandbox stops with status 0 on SIGTERM and SIGINT (the runtime's stop) and not before.
func TestStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "PAUSE_TEST_RUN_MAIN=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// A child's exit (SIGCHLD) does not stop it.
		time.Sleep(300 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGCHLD)
		select {
		case err := <-done:
			t.Fatalf("%v: exited before the signal: %v", sig, err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v: %v, want exit status 0", sig, err)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%v: still running 10s later", sig)
		}
	}
}
