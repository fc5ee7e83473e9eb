package backends

// The device a worker would run on, probed in a child process before any worker
// starts, and its name in GET /info.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// DeviceName is GET /info's word for where the workers compute: "cpu", "cuda:N"
// or "metal", from the probed device (nil: the CPU).
func DeviceName(d *Device) string {
	switch {
	case d == nil || !d.GPU:
		return "cpu"
	case strings.HasPrefix(d.Name, "CUDA"):
		return "cuda:" + strings.TrimPrefix(d.Name, "CUDA")
	}
	return strings.ToLower(d.Name)
}

// ProbeDevice runs `exe devices --json` (exe being embed-stack) with f as a child
// process (ggml's backends, once loaded, stay in a process, and serve itself never
// loads them) and returns what it printed: the device a worker started with f
// would run on. The error is the child's message.
func ProbeDevice(exe string, f DeviceArgs) (*Device, error) {
	out, err := exec.Command(exe, append([]string{"devices", "--json"}, f.Args()...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, errors.New(strings.TrimSpace(strings.TrimPrefix(string(ee.Stderr), "embed-stack devices: ")))
		}
		return nil, fmt.Errorf("probing the device with %s devices: %w", exe, err)
	}
	var d Device
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("probing the device: %q: %w", out, err)
	}
	return &d, nil
}
