//go:build linux

package caddymodule

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A Unix socket's listen address spelt with Caddy's permission bits
// ("unix//path|0666") claims the socket's path, as the plain spelling
// does: it claimed a key of its own, and a second gateway so spelt
// started beside the first, unlinked its socket's file and took it.
// The first spelling's claim (a real lock, held by this process) refuses
// every other spelling of the path, and a gateway on another path starts.
func TestAUnixSocketsPermissionBitsClaimItsPath(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "gw.sock")
	keys, err := listenKeys("unix/" + sock)
	if err != nil || len(keys) != 1 {
		t.Fatalf("listenKeys: %v %v", keys, err)
	}
	held, err := lockListen(keys[0].key, keys[0].name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Destruct()
	for _, addr := range []string{"unix/" + sock + "|0666", "unix/" + sock + "|0222", "unixgram/" + sock + "|0660", "unix/" + filepath.Join(dir, ".", "gw.sock") + "|0200"} {
		others, err := listenKeys(addr)
		if err != nil || len(others) != 1 {
			t.Fatalf("listenKeys(%q): %v %v", addr, others, err)
		}
		if others[0].name != "socket "+sock {
			t.Errorf("%s is claimed as %q", addr, others[0].name)
		}
		lock, err := lockListen(others[0].key, others[0].name)
		if err == nil {
			lock.Destruct()
			t.Errorf("%s was claimed beside %s", addr, sock)
			continue
		}
		if !strings.Contains(err.Error(), "is served by another Retainer gateway") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	other, err := listenKeys("unix/" + filepath.Join(dir, "other.sock") + "|0666")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockListen(other[0].key, other[0].name)
	if err != nil {
		t.Fatalf("another socket's path: %v", err)
	}
	lock.Destruct()
}

// Another process's listener refuses a start only where it takes
// connections meant for this gateway: the same address of the same
// family, or any address of a family the gateway listens on at every
// address of. A listener at another address of the port (127.0.0.2
// beside 127.0.0.1, [::1]), or an IPv6-only [::] beside 0.0.0.0, takes
// none and the kernel lets it be: the red team's legitimate starts and
// reloads beside them were refused.
func TestOnlyAListenerThatSharesConnectionsRefuses(t *testing.T) {
	ip := net.ParseIP
	for _, c := range []struct {
		theirs string
		ours   []string
		shares bool
	}{
		{"127.0.0.1", []string{"127.0.0.1"}, true},
		{"127.0.0.1", []string{"0.0.0.0", "::"}, true},
		{"::1", []string{"0.0.0.0", "::"}, true},
		{"::", []string{"::"}, true},
		{"127.0.0.2", []string{"127.0.0.1"}, false},
		{"::1", []string{"127.0.0.1"}, false},
		{"::", []string{"0.0.0.0"}, false},
		{"0.0.0.0", []string{"127.0.0.1"}, false},
	} {
		var ours []net.IP
		for _, o := range c.ours {
			ours = append(ours, ip(o))
		}
		if got := overlaps(ip(c.theirs), ours); got != c.shares {
			t.Errorf("a listener at %s beside ours at %v: shares %v, want %v", c.theirs, c.ours, got, c.shares)
		}
	}
}
