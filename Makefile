# The README's two commands are `make demo` and `make test`; .ci/run runs `make ci`, then
# `make race`.

GO ?= go

.PHONY: demo test ci race bench guest guest-check fuzz cpython-tests install-check data-guest data-guest-check data-test numpy-tests

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

data-guest: ## build the data Guest (numpy, sympy, mpmath) into guest/data/artifact; needs guest/build.sh's folder and numpy's source (guest/data/build.sh)
	guest/data/build.sh

data-guest-check: ## rebuild the data Guest in a scratch folder and compare with its committed artifact
	guest/data/build.sh --check

data-test: ## the data Guest's module: vet and its tests (numpy and sympy against native, the manifest)
	cd guest/data && $(GO) vet ./... && $(GO) test -timeout 20m ./...

numpy-tests: ## numpy 1.24.2's own tests (a subset of files) in the data Guest and natively, compared (slow; docs/packages.md)
	cd guest/data && $(GO) run ./cmd/numpytests -work ../../build/numpy-tests $(NUMPYTESTS_FLAGS)
