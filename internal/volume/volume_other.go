//go:build !linux

package volume

// Of cannot read a file system outside Linux: false, and callers measure or check nothing.
func Of(string) (Usage, bool) { return Usage{}, false }
