# The workerd side of bench/kv.sh: the kv read-modify-write counter as a
# Durable Object (bench/workerd/kvcounter.js) in workerd's local storage,
# one SQLite file an object. bench/kv.sh points the do-disk service at a
# directory of its own (--directory-path do-disk=...).
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "counter", worker = .counter), (name = "do-disk", disk = (path = "do-disk", writable = true)) ],
  sockets = [ ( name = "http", address = "127.0.0.1:8099", http = (), service = "counter" ) ]
);
const counter :Workerd.Worker = (
  modules = [ (name = "worker", esModule = embed "kvcounter.js") ],
  compatibilityDate = "2024-09-01",
  durableObjectNamespaces = [ (className = "Counter", uniqueKey = "retainer-bench-kv-counter") ],
  durableObjectStorage = (localDisk = "do-disk"),
  bindings = [ (name = "COUNTER", durableObjectNamespace = "Counter") ]
);
