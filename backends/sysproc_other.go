//go:build !unix

package backends

import "os/exec"

// isolate has nothing to do where there are no process groups.
func isolate(*exec.Cmd) {}

// terminate kills the worker: without SIGTERM there is no polite request to send.
// Supervised workers also stop when their stdin is closed, which is tried first.
func terminate(cmd *exec.Cmd) error { return cmd.Process.Kill() }

func processAlive(int) bool { return true } // never remove what cannot be checked
func ownedByUs(string) bool { return false }
func exhausted(error) bool  { return false }
