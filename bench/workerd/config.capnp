using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "url", worker = .url), (name = "trivial", worker = .trivial),
               (name = "page", worker = .page), (name = "post", worker = .post),
               (name = "webhook", worker = .webhook), (name = "echo", worker = .echo) ],
  sockets = [ ( name = "http", address = "127.0.0.1:8091", http = (), service = "url" ),
              ( name = "http2", address = "127.0.0.1:8092", http = (), service = "trivial" ),
              ( name = "http3", address = "127.0.0.1:8095", http = (), service = "page" ),
              ( name = "http4", address = "127.0.0.1:8096", http = (), service = "post" ),
              ( name = "http5", address = "127.0.0.1:8100", http = (), service = "webhook" ),
              ( name = "http6", address = "127.0.0.1:8101", http = (), service = "echo" ) ]
);
const url :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "worker.js") ], compatibilityDate = "2024-09-01" );
const trivial :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "trivial.js") ], compatibilityDate = "2024-09-01" );
const page :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "page.js") ], compatibilityDate = "2024-09-01" );
const post :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "post.js") ], compatibilityDate = "2024-09-01" );
const webhook :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "webhook.js") ], compatibilityDate = "2024-09-01" );
const echo :Workerd.Worker = ( modules = [ (name = "worker", esModule = embed "echo.js") ], compatibilityDate = "2024-09-01" );
