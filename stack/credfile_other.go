//go:build !linux

package stack

import (
	"errors"
	"os"
)

// memoryFile is memfd_create(2)'s, which only Linux has: elsewhere the password stays in
// PGPASSWORD.
func memoryFile(string, []byte) (*os.File, string, error) {
	return nil, "", errors.New("no memory files on this system")
}
