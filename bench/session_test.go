package bench

import "testing"

func TestParsePeer(t *testing.T) {
	p, err := ParsePeer("tei=http://127.0.0.1:9000/v1,model=qwen,pid=42")
	if err != nil || p != (Peer{Name: "tei", URL: "http://127.0.0.1:9000/v1", Model: "qwen", PID: 42}) {
		t.Errorf("ParsePeer = %+v, %v", p, err)
	}
	p, err = ParsePeer("x=http://h/v1")
	if err != nil || p.Model != "bench" || p.PID != 0 {
		t.Errorf("defaults: %+v, %v", p, err)
	}
}

func TestSessionSizes(t *testing.T) {
	for _, tt := range []struct{ long, modelCtx, want int }{
		{15000, 32768, 15040}, {15000, 0, 15040}, {100, 0, 8192}, {40000, 32768, 32768},
	} {
		if got := FloorContext(tt.long, tt.modelCtx); got != tt.want {
			t.Errorf("FloorContext(%d, %d) = %d, want %d", tt.long, tt.modelCtx, got, tt.want)
		}
	}
	for long, want := range map[int]int{1024: 4096, 4096: 4096, 15000: 16384, 32769: 65536} {
		if got := OllamaNumCtx(long); got != want {
			t.Errorf("OllamaNumCtx(%d) = %d, want %d", long, got, want)
		}
	}
}
