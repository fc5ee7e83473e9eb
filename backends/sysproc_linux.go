package backends

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the worker when the thread that started it
// exits, which for a Go program is when the process exits: the runtime never ends
// its threads except for goroutines that exit while locked to one, and nothing
// that starts workers does that.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// zombie says whether pid has exited and awaits its parent's wait.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
