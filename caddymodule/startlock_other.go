//go:build !linux

package caddymodule

import "github.com/caddyserver/caddy/v2"

// lockListen claims nothing where there are no abstract Unix sockets.
func lockListen(key, name string) (caddy.Destructor, error) { return noLock{}, nil }

type noLock struct{}

func (noLock) Destruct() error { return nil }
