//go:build !(linux && amd64)

package cpuvariant

import "errors"

// requestAMX: AMX exists on x86 only, and only Linux's permission request is known
// here.
func requestAMX() error { return errors.New("AMX is used on Linux/amd64 only") }
