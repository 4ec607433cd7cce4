module github.com/spine-run/spine/wasmtime

go 1.26.0

require (
	github.com/bytecodealliance/wasmtime-go/v39 v39.0.1
	github.com/spine-run/spine v0.1.0
	golang.org/x/sys v0.49.0
)

require github.com/tetratelabs/wazero v1.12.0 // indirect
