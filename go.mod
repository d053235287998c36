module github.com/retainer-gw/retainer

go 1.26.8

require (
	github.com/evanw/esbuild v0.28.2
	rogchap.com/v8go v0.9.0
)

require golang.org/x/sys v0.45.0 // indirect
