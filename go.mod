module github.com/retainer-gw/retainer

go 1.26.8

require (
	github.com/MicahParks/keyfunc/v3 v3.9.2
	github.com/elastic/go-seccomp-bpf v1.6.0
	github.com/evanw/esbuild v0.28.2
	github.com/golang-jwt/jwt/v5 v5.3.1
	github.com/google/uuid v1.6.0
	github.com/landlock-lsm/go-landlock v0.11.2
	go.etcd.io/bbolt v1.5.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	golang.org/x/time v0.16.0
	rogchap.com/v8go v0.9.0
)

require (
	github.com/MicahParks/jwkset v0.11.4 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/text v0.43.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
)
