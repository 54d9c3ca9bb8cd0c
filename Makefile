# duet: static binaries, FROM scratch images and the docker compose stack.
#
#   make up      build everything and start the stack (the one command on a fresh clone)
#   make e2e     end-to-end test of the stack (scripts/e2e.sh)
#   make alerts-test  promtool checks and unit tests of the alert rules (deploy/prometheus)
#   make down    stop the stack and delete its volumes (keys, JetStream data)
#
# Nothing is pulled from a registry: the binaries are built here with
# CGO_ENABLED=0 and copied into FROM scratch images (deploy/docker/).

GO        ?= go
# docker compose v2 if present, else docker-compose v1 (>= 1.29).
COMPOSE   ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
PROJECT   ?= duet
IMAGE_TAG ?= latest
DEALERS   ?= 2

SERVICES  := sensor party actuator dealer plant
# Prometheus's promtool (make alerts-test) and server (make e2e), built from
# the Go module proxy into build/tools/<version> (a new version is built
# afresh, not hidden by an older binary).
PROMTOOL_VERSION ?= v0.316.0
TOOLS            := build/tools/$(PROMTOOL_VERSION)
PROMTOOL         := $(TOOLS)/promtool
PROMETHEUS       := $(TOOLS)/prometheus
IMAGES    := $(SERVICES) nats tools
BIN       := build/bin
CTX       := build/ctx
GOBUILD   := CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w'
# The images' platform: Linux on the host's architecture by default, for the
# local stack (make up, make e2e; Docker on macOS runs Linux images too). The
# node groups of k8s/eks/cluster.yaml are x86 (c7i, m7i): build their images
# with IMAGE_PLATFORM=linux/amd64 (README, EKS step 2). For another platform
# than the host's the images get binaries cross-built into
# build/bin/<os>-<arch>, while build/bin keeps the host's own (duet keys,
# duet stalls).
HOST_PLATFORM  := $(shell $(GO) env GOOS)/$(shell $(GO) env GOARCH)
IMAGE_PLATFORM ?= linux/$(shell $(GO) env GOARCH)
ifeq ($(IMAGE_PLATFORM),$(HOST_PLATFORM))
IMGBIN    := $(BIN)
else
IMGBIN    := $(BIN)/$(subst /,-,$(IMAGE_PLATFORM))
endif
# The classic builder is enough for COPY-only images (and needs no buildx).
BUILDKIT  ?= $(shell docker buildx version >/dev/null 2>&1 && echo 1 || echo 0)
# With buildx, `docker buildx build --load`: the current builder may be one
# of the docker-container driver (docker buildx create --use), which leaves
# what it builds in its own cache unless told to load it into the engine's
# images, where compose and the e2e test look for them.
DOCKER_BUILD := $(if $(filter 1,$(BUILDKIT)),docker buildx build --load,DOCKER_BUILDKIT=0 docker build)

SHELL       := bash
.SHELLFLAGS := -eo pipefail -c

export IMAGE_TAG

.PHONY: all build images keys up down e2e e2e-ports alerts-test ps logs k8s-secrets k8s-tls k8s-monitoring k8s-dashboard clean

all: build

## build: static binaries of every service, duet and nats-server into build/bin
build:
	@mkdir -p $(BIN)
	$(GOBUILD) -o $(BIN)/ $(addprefix ./cmd/,$(SERVICES) duet)
	$(GOBUILD) -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## images: one FROM scratch image per service, plus duet-nats and duet-tools,
## for IMAGE_PLATFORM (linux/<the host's architecture> unless set)
images: build
ifneq ($(IMGBIN),$(BIN))
	@mkdir -p $(IMGBIN)
	GOOS=$(word 1,$(subst /, ,$(IMAGE_PLATFORM))) GOARCH=$(word 2,$(subst /, ,$(IMAGE_PLATFORM))) $(GOBUILD) -o $(IMGBIN)/ $(addprefix ./cmd/,$(SERVICES) duet)
	GOOS=$(word 1,$(subst /, ,$(IMAGE_PLATFORM))) GOARCH=$(word 2,$(subst /, ,$(IMAGE_PLATFORM))) $(GOBUILD) -o $(IMGBIN)/nats-server github.com/nats-io/nats-server/v2
endif
	@set -e; for img in $(IMAGES); do \
	  ctx=$(CTX)/$$img; rm -rf $$ctx; mkdir -p $$ctx/keys $$ctx/data; \
	  ln -f $(IMGBIN)/duet $$ctx/duet; \
	  case $$img in \
	    nats)  ln -f $(IMGBIN)/nats-server $$ctx/nats-server ;; \
	    tools) ;; \
	    *)     ln -f $(IMGBIN)/$$img $$ctx/$$img ;; \
	  esac; \
	  cp examples/qube-servo2/controller.json examples/qube-servo2/plant.json $$ctx/; \
	  echo "docker build duet-$$img:$(IMAGE_TAG)"; \
	  $(DOCKER_BUILD) -q --platform $(IMAGE_PLATFORM) -f deploy/docker/$$img.Dockerfile -t duet-$$img:$(IMAGE_TAG) $$ctx 2>&1 >/dev/null \
	    | { grep -v -e DEPRECATED -e 'legacy builder' -e BuildKit -e '^ *environment-variable' -e '^$$' || true; } >&2; \
	done

## up: images, the keys (once per keys volume) and the stack, detached
up: keys
	$(COMPOSE) -p $(PROJECT) up -d --scale keys=0 --scale dealer=$(DEALERS)
	$(COMPOSE) -p $(PROJECT) ps

## keys: `duet keys --dir /keys --if-missing` into the stack's keys volume,
## once: a volume that already holds keys keeps them, its nats-auth.conf
## rewritten with this release's NATS permissions ("already exists", from a
## keys service run without --if-missing, counts as done too). The compose
## keys service is then scaled to 0 so that `up` does not run it again.
keys: images
	@out=$$($(COMPOSE) -p $(PROJECT) run --rm keys 2>&1) && echo "$$out" | tail -1 || { \
	  echo "$$out" | grep -q 'already exists' || { echo "$$out" >&2; exit 1; }; \
	  echo "keys: the keys volume already holds keys; kept them"; }

## down: stop the stack and remove its containers, network and volumes
down:
	$(COMPOSE) -p $(PROJECT) down -v --remove-orphans

ps:
	$(COMPOSE) -p $(PROJECT) ps

logs:
	$(COMPOSE) -p $(PROJECT) logs --tail=50

## e2e: the end-to-end test against a real stack (builds images; always tears down)
e2e: e2e-ports
	$(MAKE) --no-print-directory images $(PROMETHEUS)
	COMPOSE='$(COMPOSE)' SKIP_BUILD=1 PROMETHEUS=$(CURDIR)/$(PROMETHEUS) scripts/e2e.sh

## e2e-ports: the ports the e2e stack publishes are free (before any build)
e2e-ports:
	@PREFLIGHT=1 COMPOSE='$(COMPOSE)' scripts/e2e.sh

## alerts-test: Prometheus's own promtool checks the alert rules and runs their unit tests
## (deploy/prometheus/duet-alerts.test.yaml); promtool is built once into build/tools/<version>
$(PROMTOOL):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)
# The e2e test's Prometheus (scrapes the stack with the alert rules loaded).
$(PROMETHEUS):
	GOBIN=$(CURDIR)/$(TOOLS) $(GO) install github.com/prometheus/prometheus/cmd/prometheus@$(PROMTOOL_VERSION)
alerts-test: $(PROMTOOL)
	$(PROMTOOL) check rules deploy/prometheus/duet-alerts.yaml
	$(PROMTOOL) test rules deploy/prometheus/duet-alerts.test.yaml

## k8s-secrets: the Secrets and the ConfigMap that k8s/ mounts, from `duet keys`
## (generated once into K8S_KEYS; keep that directory offline and out of git;
## a later run keeps its keys and rewrites nats-auth.conf with this release's
## NATS permissions, `duet keys --if-missing`):
## duet-key-<role> (<role>.seed), duet-pubkeys (every .pub), duet-controller.
K8S_KEYS   ?= build/k8s-keys
# The namespace: duet, which k8s/base/kustomization.yaml, k8s/base/namespace.yaml
# and NATS_TLS_HOSTS (nats.duet) name; to use another, change it there too.
K8S_NS     ?= duet
CONTROLLER ?= examples/qube-servo2/controller.json
ROLES      := sensor party0 party1 actuator dealer plant
KUBECTL    ?= kubectl
# Names in the NATS server certificate (clients and cluster routes).
# TLS_DAYS: the server certificate's validity, in days (its CA: ten years).
TLS_DAYS ?= 365
NATS_TLS_HOSTS ?= nats,nats.duet,nats.duet.svc,nats-0.nats-headless,nats-1.nats-headless,nats-2.nats-headless,localhost
k8s-secrets: build
	@test "$(K8S_NS)" = duet || { echo "K8S_NS=$(K8S_NS): the manifests use the namespace duet (k8s/base/kustomization.yaml, k8s/base/namespace.yaml, NATS_TLS_HOSTS); change it there, then remove this check" >&2; exit 2; }
	$(BIN)/duet keys --dir $(K8S_KEYS) --if-missing --tls-hosts $(NATS_TLS_HOSTS) --tls-days $(TLS_DAYS)
	$(KUBECTL) apply -f k8s/base/namespace.yaml
	@for r in $(ROLES); do \
	  $(KUBECTL) -n $(K8S_NS) create secret generic duet-key-$$r --from-file=$$r.seed=$(K8S_KEYS)/$$r.seed \
	    --from-file=$$r.nats.nk=$(K8S_KEYS)/$$r.nats.nk \
	    --dry-run=client -o yaml | $(KUBECTL) apply -f -; \
	done
	$(KUBECTL) -n $(K8S_NS) create configmap duet-pubkeys $(foreach r,$(ROLES),--from-file=$(r).pub=$(K8S_KEYS)/$(r).pub) \
	  --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(K8S_NS) create secret generic duet-nats-auth --from-file=nats-auth.conf=$(K8S_KEYS)/nats-auth.conf \
	  --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(K8S_NS) create secret generic duet-nats-tls --from-file=$(K8S_KEYS)/nats-cert.pem \
	  --from-file=$(K8S_KEYS)/nats-key.pem --from-file=$(K8S_KEYS)/ca.pem --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(K8S_NS) create configmap duet-nats-ca --from-file=$(K8S_KEYS)/ca.pem \
	  --dry-run=client -o yaml | $(KUBECTL) apply -f -
	$(KUBECTL) -n $(K8S_NS) create secret generic duet-controller --from-file=controller.json=$(CONTROLLER) \
	  --dry-run=client -o yaml | $(KUBECTL) apply -f -

## k8s-tls: renew the NATS server certificate in K8S_KEYS (valid TLS_DAYS)
## under the directory's CA, keeping the CA and every role key, and apply it
## with k8s-secrets; then restart the NATS servers one at a time (the
## services need no restart; a directory without the CA's key gets a new
## CA, and then every NATS server and service restarts: README, Operations,
## Renewing the TLS certificate)
k8s-tls: build
	$(BIN)/duet keys --tls-only --dir $(K8S_KEYS) --tls-hosts $(NATS_TLS_HOSTS) --tls-days $(TLS_DAYS)
	$(MAKE) k8s-secrets

## k8s-monitoring: regenerate k8s/monitoring/prometheusrule.yaml from the
## alerting rules, deploy/prometheus/duet-alerts.yaml (go test ./k8s checks it).
k8s-monitoring:
	$(GO) test ./k8s -run TestPrometheusRuleGenerated -count=1 -args -update

## k8s-dashboard: the Grafana dashboard as a ConfigMap for Grafana's dashboard
## sidecar (kube-prometheus-stack's watches the label grafana_dashboard=1).
GRAFANA_NS ?= monitoring
k8s-dashboard:
	$(KUBECTL) -n $(GRAFANA_NS) create configmap duet-dashboard \
	  --from-file=duet-dashboard.json=deploy/prometheus/duet-dashboard.json --dry-run=client -o yaml \
	  | $(KUBECTL) label --local -f - grafana_dashboard=1 -o yaml | $(KUBECTL) apply -f -

## clean: the build outputs, except K8S_KEYS (build/k8s-keys): the cluster's CA and role
## keys (make k8s-secrets would otherwise make new ones and replace the live
## Secrets with them)
clean:
	@[ ! -d build ] || find build -mindepth 1 -maxdepth 1 ! -name '$(notdir $(K8S_KEYS))' -exec rm -rf {} +
