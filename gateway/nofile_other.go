//go:build !unix

package gateway

// openFileLimit returns 0: the open-file limit is not known here.
func openFileLimit() uint64 { return 0 }
