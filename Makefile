# The README's two commands are `make demo` and `make test`; .ci/run runs `make ci`, which
# runs everything: the long suites are its own targets.

GO ?= go
# Runs go test -json and prints a line per package, per test of a second or more, and the
# output of every failure (internal/testprogress).
PROGRESS = $(GO) run ./internal/testprogress

.PHONY: demo test ci gofmt vet tidy test-all race fuzz fuzz-short examples bench guest guest-check cpython-tests install-check data-guest data-guest-check data-native data-test numpy-tests pandas-tests image image-bench deploy-test fleet-test py-client-tests ts-client-tests wasmtime-test wasmtime-compare

demo: ## run the seed's demo
	$(GO) run ./cmd/spine demo

# The packages make test, test-all, race and vet cover: the core module's (./... in the
# root stops at the nested modules), the command's and the cloud store's. The data Guest's,
# deploy's and the examples' modules have targets of their own (data-test, deploy-test,
# examples). go.work makes them one workspace (docs/release.md).
PKGS = ./... ./cmd/spine/... ./cloudstore/...

# The slowest tests that -short keeps, which make test leaves to make ci: the differential
# corpora and memory at its limit (the Guest's suites, ./tests), a session restored on its
# own image (the root), the caches damaged and made again (internal/engine; docs/testing.md).
SLOW_TESTS = ^(TestDifferentialPrefixMode|TestDifferentialEarlyReads|TestPLMMemoryAtTheLimit|TestSessionRestoreOnOwnImage|TestModuleCache|TestImageCache|TestImageCacheDamaged|TestCacheFolderDamaged)$$

test: vet ## the quick suite: vet, then every test with -short but SLOW_TESTS (the real Guest included; soak, corpora and processes skipped)
	$(PROGRESS) $(GO) test -json -short -skip '$(SLOW_TESTS)' -timeout 20m $(PKGS)

ci: gofmt vet test-all race fuzz-short examples py-client-tests ts-client-tests cpython-tests data-test deploy-test fleet-test wasmtime-test install-check ## everything CI runs (docs/testing.md has the parts and their durations)

gofmt: ## fails when gofmt would change a file
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

test-all: ## every test, without -short
	$(PROGRESS) $(GO) test -json -timeout 45m $(PKGS)

race: ## every test with the race detector; -short skips the heaviest (soak, bench, corpora, processes)
	$(PROGRESS) $(GO) test -json -race -short -timeout 30m $(PKGS)

wasmtime-test: ## the wasmtime module (its own go.mod, cgo: the Guest on wasmtime, a measurement beside the engine): vet and its tests; the first run compiles the Guest and the data Guest (about a minute and two), cached in the user's cache folder
	cd wasmtime && $(GO) vet ./... && $(GO) test -count=1 -timeout 10m ./...

# The parts of make wasmtime-compare: TestCompare (the default Guest) and
# TestCompareData (the data Guest); COMPARE='^TestCompareData$$' runs one.
COMPARE ?= ^TestCompare(Data)?$$

wasmtime-compare: data-native ## the Guest on wasmtime against wazero in one process: seed demo, empty program, two at once, compute, the guarantees wasmtime's WASI misses; the data Guest's first start and the numpy suite, with native numpy (docs/performance.md)
	cd wasmtime && SPINE_WASMTIME_COMPARE=1 $(GO) test -count=1 -timeout 30m -run '$(COMPARE)' -v ./...

examples: ## the examples module (its own go.mod: the model SDKs): vet, build and its tests against recorded exchanges
	cd examples && $(GO) vet ./... && $(GO) test -timeout 10m ./...

py-client-tests: ## the Python client (clients/python): its tests with Debian's pytest (python3-pytest, installed if missing) against a real spine serve they start, built into build/bin
	clients/python/test.sh

install-check: ## the core's go line is the lowest its dependencies allow and its module graph has no cloud SDK; then a release simulated (deploy/release): every module published at the release version into a module proxy in a folder, spine installed from it with go install and its demo run, the README's first program built after go get (docs/release.md)
	$(GO) test -count=1 -run '^(TestGoDirective|TestLeanCore)$$' -v .
	cd deploy && $(GO) test -count=1 -timeout 30m -run '^TestRelease$$' -v ./release

tidy: ## go mod tidy in every module of go.work, each with its siblings' folders for the release version they require (.ci/tidy)
	GO=$(GO) .ci/tidy

bench: ## the Go benchmarks, medians reported as p50-*
	$(GO) test -run '^$$' -bench . -benchtime 20x .

FUZZTIME ?= 30s
# Fuzzing runs on Go 1.27.3, taken from the module proxy as the go command takes any
# toolchain: Go 1.26's fuzzing coordinator can fail a target with "context deadline
# exceeded" when -fuzztime ends while a worker is busy, with no failing input
# (go.dev/issue/75804, fixed in 1.27). The module and its other targets stay on go.mod's Go;
# where 1.27.3 cannot be had, fuzzing runs on the local Go and says so.
FUZZ_TOOLCHAIN ?= go1.27.3
fuzz: ## every fuzz target of the modules for FUZZTIME (30 s; found in its *_test.go files)
	toolchain=$(FUZZ_TOOLCHAIN); \
	GOTOOLCHAIN=$$toolchain $(GO) version >/dev/null || { \
		echo "warning: no $$toolchain: fuzzing on $$($(GO) env GOVERSION), whose coordinator may fail a target as its time ends (go.dev/issue/75804)"; \
		toolchain=local; }; \
	for file in $$(grep -rlE '^func Fuzz' --include='*_test.go' --exclude-dir=examples --exclude-dir=build .); do \
		for target in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$file); do \
			echo "== $$target ($$(dirname $$file))"; \
			GOTOOLCHAIN=$$toolchain $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file) || exit 1; \
		done; \
	done

fuzz-short: ## every fuzz target for 10 s: a short pass, for CI
	$(MAKE) fuzz FUZZTIME=10s

fleet-test: ## three spine serve replicas sharing a real S3 server (versitygw, built into build/bin) behind HAProxy (installed if missing): kill -9, a rolling restart, the figures of docs/performance.md
	internal/fleet/fleet-test.sh

ts-client-tests: ## the TypeScript client (clients/typescript): npm ci, tsc, then its tests (node --test) against a spine serve built into a temporary folder (docs/testing.md)
	cd clients/typescript && npm ci && npm run build
	dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) build -o "$$dir/spine" ./cmd/spine && \
	cd clients/typescript && SPINE_BIN="$$dir/spine" npm test

guest: ## rebuild the Guest artifact (needs Debian's WASI toolchain; installs it as root)
	guest/build.sh

guest-check: ## rebuild the Guest in a scratch folder and compare with the committed artifact
	guest/build.sh --check

cpython-tests: ## CPython 3.11.2's own tests in the Guest and natively, compared (fetches CPython's source; needs /usr/bin/python3.11; docs/fidelity.md)
	src=$$(guest/build.sh --source-only) && \
	$(GO) run ./internal/cpytests/cmd/cpytests -source "$$src" -work build/cpython-tests $(CPYTESTS_FLAGS)

data-guest: ## build the data Guest (numpy, pandas, sympy, mpmath) into guest/data/artifact; needs guest/build.sh's folder, numpy's source and go for pandas' (guest/data/build.sh)
	guest/data/build.sh

data-guest-check: ## rebuild the data Guest in a scratch folder and compare with its committed artifact
	guest/data/build.sh --check

data-native: ## Debian's numpy, pandas, sympy, PyYAML and pytest for /usr/bin/python3, the data Guest's native reference (installs them as root when missing)
	@/usr/bin/python3 -c 'import numpy, pandas, sympy, yaml, pytest' 2>/dev/null || \
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy python3-pandas python3-sympy python3-yaml python3-pytest >/dev/null; }

data-test: data-native ## the data Guest's module: vet and its tests (numpy, pandas and sympy against native, the manifest)
	cd guest/data && $(GO) vet ./... && $(GO) test -timeout 20m ./...

numpy-tests: data-native ## numpy 1.24.2's own tests (a subset of files) in the data Guest and natively, compared (slow; docs/packages.md)
	cd guest/data && $(GO) run ./cmd/numpytests -work ../../build/numpy-tests $(NUMPYTESTS_FLAGS)

pandas-tests: data-native ## pandas 1.5.3's own tests (a subset of files) in the data Guest and natively, compared (slow; docs/packages.md)
	cd guest/data && $(GO) run ./cmd/numpytests -suite pandas -work ../../build/pandas-tests $(PANDASTESTS_FLAGS)

image: ## the container image, without a daemon: build/image/oci (OCI layout) and build/image/spine.tar (docker load -i); IMAGE_FLAGS=-guest=data bakes the data Guest's code too; docs/deploy.md
	cd deploy && $(GO) run ./cmd/spine-image -src .. -out ../build/image $(IMAGE_FLAGS)

image-bench: image ## seconds from a new replica's start to its first /v1/run answered, from the image's baked cache (median of 5; needs root)
	cd deploy && $(GO) run ./cmd/image-bench -image ../build/image/oci -n 5

deploy-test: ## the deploy module's tests: the manifests decoded strictly, the probes against spine serve, the image built and run (needs root); its release test is install-check's
	cd deploy && $(GO) vet ./... && $(GO) test -timeout 40m -skip '^TestRelease$$' ./...
