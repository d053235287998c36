//go:build !linux

package caddymodule

// sharedListeners checks nothing where /proc/net is not.
func sharedListeners(ports []int, network, host string) error { return nil }
