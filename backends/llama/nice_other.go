//go:build !unix

package llama

import "errors"

func lowerPriority(int) error {
	return errors.New("thread priorities are not supported on this platform")
}
