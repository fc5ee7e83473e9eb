package llama

import "testing"

// TestContextFreeOutlivesScheduler: the backends of a hooked device (a GPU's) are
// freed after the scheduler of their context, whose free calls each backend's
// reset (lifetime.c). No GPU here: the test hooks the CPU device, and the probe
// gives the backends it creates a reset that counts the calls on a backend already
// freed. With plain llama_free every such call comes late: on an H200 the first
// Close died there, in CUDA's reset.
func TestContextFreeOutlivesScheduler(t *testing.T) {
	if err := hookBackendFree(ggmlCPUDevice()); err != nil {
		t.Fatal(err)
	}
	probeResets(true)
	e := openTiny(t, Config{Device: DeviceCPU})
	if v := embedOne(t, e, randomSeq(5, 40, e.Info().NVocab)); len(v) != e.Info().NEmbd {
		t.Fatalf("%d dimensions, want %d", len(v), e.Info().NEmbd)
	}
	e.Close()
	calls, late := probeResets(false)
	if calls == 0 {
		t.Fatal("no backend reset was called: the probe saw no context freed")
	}
	if late != 0 {
		t.Errorf("%d of %d backend resets ran on a backend already freed", late, calls)
	}
}
