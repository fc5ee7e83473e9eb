package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/backends/cpuvariant"
	"github.com/embed-stack/embed-stack/backends/llama"
	"github.com/embed-stack/embed-stack/internal/flagconfig"
	"github.com/embed-stack/embed-stack/weights"
)

// checkDevice refuses a malformed device name, a negative layer count, a CPU
// variant that names none or that this CPU lacks an instruction set of, and a
// --cpu-accel other than auto or off.
func checkDevice(d backends.DeviceArgs) error {
	if _, _, err := llama.ParseDevice(d.Device); err != nil {
		return fmt.Errorf("--device: %w", err)
	}
	if d.GPULayers < 0 {
		return fmt.Errorf("--gpu-layers must not be negative (0 = all layers); got %d", d.GPULayers)
	}
	if err := cpuvariant.Check(cpuvariant.ReadHost(), d.CPUVariant); err != nil {
		return fmt.Errorf("--cpu-variant: %w", err)
	}
	if err := backends.CheckCPUAccel(cpuvariant.ReadHost(), d.CPUAccel); err != nil {
		return fmt.Errorf("--cpu-accel: %w", err)
	}
	return nil
}

// deviceConfig fills the device fields of an engine configuration.
func deviceConfig(d backends.DeviceArgs, c *llama.Config) {
	c.Device, c.GPULayers, c.BackendDir, c.CPUVariant, c.CPUAccel = d.Device, d.GPULayers, d.BackendDir, d.CPUVariant, d.CPUAccel
}

// explainDeviceError adds to an engine's device or backend error the flags that
// change the outcome.
func explainDeviceError(err error) error {
	var de *llama.DeviceError
	var be *llama.BackendError
	switch {
	case errors.As(err, &de):
		return fmt.Errorf("--device: %w (the folder: --backend-dir or EMBED_STACK_BACKEND_DIR; or --device auto to run on the CPU when no GPU is there)", err)
	case errors.As(err, &be):
		return fmt.Errorf("--backend-dir: %w (--device cpu loads none)", err)
	case errors.Is(err, llama.ErrBackendFolder):
		return fmt.Errorf("--backend-dir: %w", err)
	}
	return err
}

// devicesCommand is `embed-stack devices`: the device a worker would run on, found
// as a worker finds it (backends loaded from the folder), without loading a model.
// serve runs it before its workers, to size the ephemeral workers against the
// GPU's memory.
type devicesCommand struct {
	device         backends.DeviceArgs
	json           bool
	stdout, stderr io.Writer
}

func newDevices(args []string, stdout, stderr io.Writer) (command, int) {
	c := &devicesCommand{stdout: stdout, stderr: stderr}
	s := flagconfig.New("embed-stack devices", "embed-stack devices [flags]",
		"Prints the device a worker would run on with these flags, and its memory, without\n"+
			"loading a model: a check of a GPU setup (`make cuda`, drivers).")
	c.device.AddFlags(s)
	s.Bool(&c.json, "json", false, "print the device as the JSON object of a worker's /health \"device\" field")
	err := s.Parse(args, nil)
	if err == nil {
		err = checkDevice(c.device)
	}
	if err != nil {
		return nil, flagconfig.Report(err, "embed-stack devices", stdout, stderr)
	}
	return c, 0
}

// Run probes the device and prints it. The probe is short and not interrupted.
func (c *devicesCommand) Run(context.Context) error {
	var lc llama.Config
	deviceConfig(c.device, &lc)
	d, err := llama.Probe(lc)
	if err != nil {
		fmt.Fprintln(c.stderr, "embed-stack devices:", explainDeviceError(err))
		return exitStatus(1)
	}
	if c.json {
		_ = json.NewEncoder(c.stdout).Encode(&d)
		return nil
	}
	fmt.Fprintf(c.stdout, "device %s (%s), backend %s, gpu %t, memory %d MiB total, %d MiB free\n",
		d.Name, d.Description, d.Backend, d.GPU, d.MemoryTotal>>20, d.MemoryFree>>20)
	if d.Note != "" {
		fmt.Fprintln(c.stdout, "note:", d.Note)
	}
	fmt.Fprintf(c.stdout, "cpu kernels: %s: %s\n", d.CPUVariant, d.CPUVariantNote)
	if d.CPUAccel != "" {
		fmt.Fprintf(c.stdout, "cpu accel: %s (an encoder's attention scores, GELU, products with F32 weights and with BF16 weights (AVX2's FMAs where the CPU has no AVX-512), and where the CPU has AVX512_BF16 an embedding model's products with Q8_0 weights and a decoder's attention over long inputs; a decoder's LM head is skipped; --cpu-accel off leaves them to ggml)\n", d.CPUAccel)
	} else if !d.GPU {
		fmt.Fprintln(c.stdout, "cpu accel: off (--cpu-accel off, or a CPU without AVX-512F or AVX2 with FMA)")
	}
	if why, ok := weights.PaysOff(&d); ok && d.CPUAccelBF16 {
		fmt.Fprintf(c.stdout, "weights: --weights auto converts F16 matrices to BF16 at load, the layers' matrices in those kernels' panels, which every worker maps: %s\n", why)
	} else if ok {
		fmt.Fprintf(c.stdout, "weights: --weights auto converts F16 matrices to BF16 at load: %s\n", why)
	} else {
		fmt.Fprintf(c.stdout, "weights: --weights auto loads F16 files as they are: %s\n", why)
	}
	if d.Warning != "" {
		fmt.Fprintln(c.stdout, "warning:", d.Warning)
	}
	return nil
}

// Close does nothing: there is nothing to cut short.
func (c *devicesCommand) Close() error { return nil }

// mayHaveGPU says whether a worker started with f might run on a GPU, so that
// serve must probe where (backends.ProbeDevice): a GPU asked for by name, or auto where
// Metal is compiled in or a backend folder exists.
func mayHaveGPU(f backends.DeviceArgs) bool {
	kind, _, _ := llama.ParseDevice(f.Device)
	switch kind {
	case llama.DeviceCPU:
		return false
	case llama.DeviceAuto:
		if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
			return true
		}
		if f.BackendDir != "" {
			return true // and a folder that is not there fails now, not in a worker
		}
		_, err := os.Stat(llama.DefaultBackendDir())
		return err == nil
	}
	return true
}
