# The README's two commands are `make demo` and `make test`; .ci/run runs `make ci`, which
# runs everything: the long suites are its own targets.

GO ?= go
# Runs go test -json and prints a line per package, per test of a second or more, and the
# output of every failure (internal/testprogress).
PROGRESS = $(GO) run ./internal/testprogress

.PHONY: demo test ci gofmt vet test-all race fuzz fuzz-short examples bench guest guest-check cpython-tests install-check

demo: ## run the seed's demo
	$(GO) run ./cmd/spine demo

test: vet ## the quick suite: vet, then every test with -short (the real Guest included; soak, corpora and processes skipped)
	$(PROGRESS) $(GO) test -json -short -timeout 20m ./...

ci: gofmt vet test-all race fuzz-short examples cpython-tests ## everything CI runs (docs/testing.md has the parts and their durations)

gofmt: ## fails when gofmt would change a file
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi

vet:
	$(GO) vet ./...

test-all: ## every test, without -short
	$(PROGRESS) $(GO) test -json -timeout 45m ./...

race: ## every test with the race detector; -short skips the heaviest (soak, bench, corpora, processes)
	$(PROGRESS) $(GO) test -json -race -short -timeout 30m ./...

examples: ## the examples module (its own go.mod: the model SDKs): vet, build and its tests against recorded exchanges
	cd examples && $(GO) vet ./... && $(GO) test -timeout 10m ./...

install-check: ## go.mod's go line is the lowest the dependencies allow; the README's first program builds in a new module with it (from the module cache)
	$(GO) test -count=1 -run '^(TestGoDirective|TestInstall)$$' -v .

bench: ## the Go benchmarks, medians reported as p50-*
	$(GO) test -run '^$$' -bench . -benchtime 20x .

FUZZTIME ?= 30s
fuzz: ## every fuzz target of the module for FUZZTIME (30 s; found in its *_test.go files)
	for file in $$(grep -rlE '^func Fuzz' --include='*_test.go' --exclude-dir=examples --exclude-dir=build .); do \
		for target in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$file); do \
			echo "== $$target ($$(dirname $$file))"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file) || exit 1; \
		done; \
	done

fuzz-short: ## every fuzz target for 10 s: a short pass, for CI
	$(MAKE) fuzz FUZZTIME=10s

guest: ## rebuild the Guest artifact (needs Debian's WASI toolchain; installs it as root)
	guest/build.sh

guest-check: ## rebuild the Guest in a scratch folder and compare with the committed artifact
	guest/build.sh --check

cpython-tests: ## CPython 3.11.2's own tests in the Guest and natively, compared (fetches CPython's source; needs /usr/bin/python3.11; docs/fidelity.md)
	src=$$(guest/build.sh --source-only) && \
	$(GO) run ./internal/cpytests/cmd/cpytests -source "$$src" -work build/cpython-tests $(CPYTESTS_FLAGS)
