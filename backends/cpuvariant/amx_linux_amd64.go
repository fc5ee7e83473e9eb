package cpuvariant

import (
	"fmt"
	"syscall"
)

// Linux's arch_prctl codes for dynamically enabled XSAVE state (asm/prctl.h) and the
// AMX tile data component (XFEATURE_XTILEDATA), as ggml-cpu/amx/amx.cpp uses them.
const (
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// requestAMX asks the kernel for permission to use the AMX tile registers in this
// process (Linux 5.16 and later require it before the first AMX instruction).
// Asking again, as ggml's AMX code does when it starts, is harmless.
func requestAMX() error {
	if _, _, errno := syscall.Syscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); errno != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w", errno)
	}
	return nil
}
