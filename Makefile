# gpu-scheduler — run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
TOOLS_BIN := $(CURDIR)/_output/bin
SCENARIO  ?= scenarios/quickstart.yaml

## help: list the targets and what they do
.PHONY: help
help:
	@grep -hE '^## ' $(MAKEFILE_LIST) | sed -e 's/^## //' | awk -F': ' '{printf "  %-22s %s\n", $$1, $$2}'

## build: build every binary in cmd/ into ./bin
.PHONY: build
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO) build -o $(BIN)/ ./cmd/...

## generate: regenerate deepcopy, CRD manifests, clientset, listers and informers
.PHONY: generate
generate:
	bash hack/update-codegen.sh

## verify: gofmt, go vet and generated code up to date
.PHONY: verify
verify:
	bash hack/verify.sh

## unit: hermetic unit tests, fuzz seeds and benchmark compilation (go test ./...)
.PHONY: unit
unit:
	CGO_ENABLED=1 $(GO) test -count=1 ./...
	CGO_ENABLED=1 $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...

## test: everything CI runs: verify, unit tests, integration and acceptance tests
.PHONY: test
test: verify unit
