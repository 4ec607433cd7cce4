# The README's two commands are `make demo` and `make test`; .ci/run runs `make ci`, then
# `make race`.

GO ?= go

.PHONY: demo test ci race bench guest guest-check fuzz cpython-tests install-check image image-bench deploy-test

demo: ## run the seed's demo
	$(GO) run ./cmd/spine demo

test: ## vet and run every test (real Guest included), and the examples module's against its recorded exchanges
	$(GO) vet ./...
	$(GO) test -timeout 30m ./...
	cd examples && $(GO) vet ./... && $(GO) test -timeout 10m ./...

install-check: ## go.mod's go line is the lowest the dependencies allow; the README's first program builds in a new module with it (from the module cache)
	$(GO) test -count=1 -run '^(TestGoDirective|TestInstall)$$' -v .

ci: test
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi

race: ## every test with the race detector; -short skips the heaviest (soak, bench, corpora, processes)
	$(GO) test -race -short -timeout 30m ./...

bench: ## the Go benchmarks, medians reported as p50-*
	$(GO) test -run '^$$' -bench . -benchtime 20x .

fuzz: ## every fuzz target of the module for 30 s (found in its *_test.go files)
	for file in $$(grep -rlE '^func Fuzz' --include='*_test.go' --exclude-dir=examples --exclude-dir=build .); do \
		for target in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$file); do \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime 30s ./$$(dirname $$file) || exit 1; \
		done; \
	done

guest: ## rebuild the Guest artifact (needs Debian's WASI toolchain; installs it as root)
	guest/build.sh

guest-check: ## rebuild the Guest in a scratch folder and compare with the committed artifact
	guest/build.sh --check

cpython-tests: ## CPython 3.11.2's own tests in the Guest and natively, compared (slow; docs/fidelity.md)
	src=$$(guest/build.sh --source-only) && \
	$(GO) run ./internal/cpytests/cmd/cpytests -source "$$src" -work build/cpython-tests $(CPYTESTS_FLAGS)

image: ## the container image, without a daemon: build/image/oci (OCI layout) and build/image/spine.tar (docker load -i); docs/deploy.md
	cd deploy && $(GO) run ./cmd/spine-image -src .. -out ../build/image

image-bench: image ## seconds from a new replica's start to its first /v1/run answered, from the image's baked cache (median of 5; needs root)
	cd deploy && $(GO) run ./cmd/image-bench -image ../build/image/oci -n 5

deploy-test: ## the deploy module's tests: the manifests decoded strictly, the probes against spine serve, the image built and run (needs root)
	cd deploy && $(GO) vet ./... && $(GO) test -timeout 20m ./...
