// Package cluster is what makes several gateways one service on etcd
// (docs/cluster.md): each gateway is a member under an etcd lease it keeps
// alive, and owns spaces (a registry's tenant) under that lease by compare
// and swap, so every space has at most one writer. A member that cannot
// renew its lease stops serving before the lease can expire by its own
// clock; a dead member's lease expires and takes its spaces with it, and
// the next request for one, at any gateway, claims it there.
//
// It sits beside the store: it claims the fences the store checks
// (store.Etcd's owner keys), and the gateway's store.Writer takes its
// claims from here. It knows nothing of handles, HTTP or V8.
package cluster
