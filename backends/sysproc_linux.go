package backends

import "syscall"

// dieWithParent has the kernel SIGKILL the worker when the thread that started it
// exits, which for a Go program is when the process exits: the runtime never ends
// its threads except for goroutines that exit while locked to one, and nothing
// that starts workers does that.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
