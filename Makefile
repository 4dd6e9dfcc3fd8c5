# gpufleet.inference developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LINK := collections/ansible_collections/gpufleet/inference
INVENTORY := inventories/lab

.PHONY: help setup lab lab-image lab-down lab-status demo llama-demo test check lint sanity units pytest molecule bench stress build constraints clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP) $(LINK) ## Create .venv from the pinned requirements and link the collection for ansible.cfg

$(STAMP): requirements.txt requirements-test.txt constraints.txt scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	touch $@

$(LINK):
	mkdir -p $(dir $(LINK))
	ln -sfn ../../.. $(LINK)

lab: setup ## Start the lab hosts over SSH (LAB_HOSTS=3, LAB_SERVING=vllm|site|llama|none) and write inventories/lab/topology.yml
	$(PY) scripts/lab.py up

lab-image: ## Build (or reuse) the cached lab base image
	python3 scripts/lab.py image

lab-status: ## Show the lab hosts
	python3 scripts/lab.py status

lab-down: ## Remove the lab hosts, network and inventory (the cached image stays)
	python3 scripts/lab.py down

DEMO_HOSTS ?= 4

demo: setup ## The flagship composition on a 4-host lab: plan, fabric, NCCL, a vLLM PP=2 replica, acceptance; prints a completion
	$(MAKE) lab LAB_HOSTS=$(DEMO_HOSTS) LAB_SERVING=vllm
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/site.yml --diff
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/vllm_serving.yml --tags vllm_smoke
	@test -f fabric-report/fabric-report.html && echo "acceptance report: $(CURDIR)/fabric-report/fabric-report.html"
	@test -f serving-acceptance/serving-acceptance.html && echo "serving report: $(CURDIR)/serving-acceptance/serving-acceptance.html"

llama-demo: setup ## A llama.cpp RPC cluster on a 3-host lab (coordinator and two RPC workers), with a benchmark
	$(MAKE) lab LAB_HOSTS=3 LAB_SERVING=llama
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/llama_rpc_cluster.yml -e llama_server_benchmark=true

test: setup lab-image ## Run every test stage; stops at the first failure (docs/testing.md)
	$(PY) scripts/run_tests.py $(STAGES)

check: setup ## The edit-test loop: static stages, unit tests and the bad-input suite (no hosts)
	$(PY) scripts/run_tests.py yamllint ansible-lint ruff changelog-lint role-docs sanity units agents bad-inputs

lint: setup ## yamllint, ansible-lint, ruff, the changelog linter and the role README tables
	$(PY) scripts/run_tests.py yamllint ansible-lint ruff changelog-lint role-docs

sanity: setup ## ansible-test sanity from a copy under ansible_collections/
	$(PY) scripts/run_tests.py sanity

units: setup ## ansible-test units
	$(PY) scripts/run_tests.py units

pytest: setup ## pytest lab and packaging tests (tests/unit runs under `make units`)
	$(PY) scripts/run_tests.py pytest

molecule: setup lab-image ## The molecule scenarios make test runs (a role developer runs the others: molecule test -s NAME)
	$(PY) scripts/run_tests.py molecule

bench: setup lab-image ## Performance benchmarks on the demo lab, each a ratio against a reference measured in the same run
	$(MAKE) lab LAB_HOSTS=$(DEMO_HOSTS) LAB_SERVING=vllm
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/site.yml --skip-tags gpufleet_validation
	$(PY) benchmarks/vllm_pipeline.py
	$(PY) benchmarks/serving_pipeline.py
	$(PY) benchmarks/fabric.py engine
	$(PY) benchmarks/fabric.py schedule
	$(PY) benchmarks/site.py ssh
	$(PY) benchmarks/topology_scale.py

stress: setup ## Every test that starts a process or a thread, 20 times, with both cores kept busy
	$(PY) scripts/stress_tests.py

build: setup ## Build the collection artifact (without lab, tests and CI files)
	$(VENV)/bin/ansible-galaxy collection build --force --output-path build/

constraints: ## Re-pin constraints.txt after changing requirements*.txt
	rm -rf $(VENV) && python3 -m venv $(VENV) && $(VENV)/bin/pip install -q -r requirements-test.txt
	{ head -2 constraints.txt; $(VENV)/bin/pip freeze --exclude-editable; } > constraints.txt.new && mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean: ## Remove build outputs (not the venv, not the lab)
	rm -rf build/ tests/output/ .cache/
