module github.com/spine-run/spine

go 1.26.8

require github.com/tetratelabs/wazero v1.12.0

require (
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
