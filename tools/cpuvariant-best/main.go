// Command cpuvariant-best prints the name of the best CPU kernel variant this CPU
// runs (cpuvariant.Usable's last; nothing when it runs none), for `make test`:
// the end-to-end tests load that variant, so that a host with AVX-512 or AMX tests
// the kernels its users get and not only the AVX2 ones. It is the same choice as a
// worker's --cpu-variant auto, read from the same package, so the Makefile keeps
// no copy of the rule.
package main

import (
	"fmt"

	"github.com/embed-stack/embed-stack/backends/cpuvariant"
)

func main() {
	if u := cpuvariant.Usable(cpuvariant.ReadHost()); len(u) > 0 {
		fmt.Println(u[len(u)-1].Name)
	}
}
