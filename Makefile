# gpufleet.inference developer entry points. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LINK := collections/ansible_collections/gpufleet/inference
INVENTORY := inventories/lab

.PHONY: help setup lab lab-image lab-down lab-status demo test lint sanity units pytest molecule build constraints clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP) $(LINK) ## Create .venv from the pinned requirements and link the collection for ansible.cfg

$(STAMP): requirements.txt requirements-test.txt constraints.txt scripts/setup.sh
	bash scripts/setup.sh $(VENV)
	touch $@

$(LINK):
	mkdir -p $(dir $(LINK))
	ln -sfn ../../.. $(LINK)

lab: setup ## Start the lab hosts (LAB_HOSTS=3) and write inventories/lab/hosts.yml
	$(PY) scripts/lab.py up

lab-image: ## Build (or reuse) the cached lab base image
	python3 scripts/lab.py image

lab-status: ## Show the lab hosts
	python3 scripts/lab.py status

lab-down: ## Remove the lab hosts, network and inventory (the cached image stays)
	python3 scripts/lab.py down

demo: lab ## Bring the lab up, configure it, and serve a completion through its llama.cpp RPC cluster
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/site.yml --diff
	$(VENV)/bin/ansible-playbook -i $(INVENTORY) playbooks/llama_rpc_cluster.yml -e llama_cluster_benchmark=true

test: setup lab-image ## Run every test stage; stops at the first failure
	$(PY) scripts/run_tests.py $(STAGES)

lint: setup ## yamllint, ansible-lint, ruff and the changelog linter
	$(PY) scripts/run_tests.py yamllint ansible-lint ruff changelog-lint

sanity: setup ## ansible-test sanity from a copy under ansible_collections/
	$(PY) scripts/run_tests.py sanity

units: setup ## ansible-test units
	$(PY) scripts/run_tests.py units

pytest: setup ## pytest unit and lab tests
	$(PY) scripts/run_tests.py pytest

molecule: setup lab-image ## every molecule scenario
	$(PY) scripts/run_tests.py molecule

build: setup ## Build the collection artifact (without lab, tests and CI files)
	$(VENV)/bin/ansible-galaxy collection build --force --output-path build/

constraints: ## Re-pin constraints.txt after changing requirements*.txt
	rm -rf $(VENV) && python3 -m venv $(VENV) && $(VENV)/bin/pip install -q -r requirements-test.txt
	{ head -2 constraints.txt; $(VENV)/bin/pip freeze --exclude-editable; } > constraints.txt.new && mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean: ## Remove build outputs (not the venv, not the lab)
	rm -rf build/ tests/output/ .cache/
