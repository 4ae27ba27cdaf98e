# verishard: `make test` and `make demo` do all set-up on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := all
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
JOBS   ?= 2
APT_PACKAGES := coq ocaml-nox ocaml-findlib openmpi-bin libopenmpi-dev g++ make
# The Python the pybind11 module is built for, and what must exist before the core builds. `make` builds
# for the project's venv after installing the Debian packages; the PEP 517 backend (build_backend/) runs
# `make core CORE_PY=<the build environment's python> CORE_SETUP=`, which installs nothing.
CORE_PY    ?= $(PY)
CORE_SETUP ?= venv
EXT := $(shell $(if $(wildcard $(CORE_PY)),$(CORE_PY),python3) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
CORE_SO := python/verishard/_core$(EXT)
THEORIES := $(wildcard coq/theories/*.v)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export XLA_FLAGS := --xla_force_host_platform_device_count=8
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: all deps apt venv coq extract core bindings proofs test demo bench clean

all: bindings

## --- set-up -----------------------------------------------------------
deps: apt venv

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

venv: $(VENV)/.deps-stamp

$(VENV)/.deps-stamp: requirements.txt | apt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements.txt
	touch $@

## --- verified core ----------------------------------------------------
coq/CoqMakefile: coq/_CoqProject | $(CORE_SETUP)
	cd coq && coq_makefile -f _CoqProject -o CoqMakefile

coq: coq/CoqMakefile
	$(MAKE) -C coq -f CoqMakefile -j$(JOBS) --no-print-directory

coq/extract/verishard_core.ml: $(THEORIES) | coq
	$(MAKE) coq
	mkdir -p coq/extract
	cd coq/extract && coqc -Q ../theories VS ../theories/Extract.v

extract: coq/extract/verishard_core.ml

## --- bindings: OCaml object with a C ABI, pybind11 module -------------
build/vscore.o: coq/extract/verishard_core.ml bindings/glue.ml
	mkdir -p build
	cp coq/extract/verishard_core.ml coq/extract/verishard_core.mli bindings/glue.ml build/
	(cd build && ocamlfind ocamlopt -O2 -inline 50 -output-complete-obj -runtime-variant _pic \
	  -o vscore.o verishard_core.mli verishard_core.ml glue.ml 2>/dev/null) \
	  || (cd build && ocamlfind ocamlopt -inline 50 -output-complete-obj -runtime-variant _pic \
	  -o vscore.o verishard_core.mli verishard_core.ml glue.ml)

$(CORE_SO): build/vscore.o bindings/stubs.c bindings/stubs.h bindings/module.cpp | $(CORE_SETUP)
	gcc -O2 -fPIC -c bindings/stubs.c -I$$(ocamlfind ocamlc -where) -o build/stubs.o
	g++ -O2 -fPIC -shared -std=c++17 bindings/module.cpp build/stubs.o build/vscore.o \
	  $$($(CORE_PY) -m pybind11 --includes) -Ibindings -lm -ldl -o $@.tmp
	mv $@.tmp $@  # a new file: processes that loaded the old module keep theirs intact

# The verified core alone: what the PEP 517 backend builds before packing the wheel.
core: $(CORE_SO)

# The venv's editable install goes through the same backend (build_backend/verishard_backend.py), which
# runs `make core` again: by then a no-op, so the Coq build runs once.
bindings: $(CORE_SO) $(VENV)/.install-stamp

$(VENV)/.install-stamp: pyproject.toml setup.py build_backend/verishard_backend.py | venv $(CORE_SO)
	$(PIP) install -q --no-deps --no-build-isolation -e .
	touch $@

## --- trust statement --------------------------------------------------
# Builds coq/'s tracked files again in a temporary copy, compares its extraction with coq/extract's,
# runs coqchk over every .vo (coq/check_trust.py).
proofs: extract
	bash coq/check_assumptions.sh -j$(JOBS)

## --- the two README commands -----------------------------------------
test: deps all proofs
	$(PY) -m pytest -q -p no:cacheprovider -rs tests python/verishard --doctest-modules

demo: deps all
	$(VENV)/bin/verishard demo
	$(PY) -m verishard.torch.demo
	$(PY) -m verishard.butterfly.demo

bench: deps all
	$(PY) bench/planner.py
	$(PY) bench/traffic.py
	$(PY) bench/exchange.py
	$(PY) bench/scaling.py
	$(PY) bench/optimality.py
	$(PY) bench/certify.py --core --normal-form
	$(PY) bench/jax_timing.py
	$(PY) bench/jax_memory.py --sizes 256,1024 --time-max 256
	$(PY) bench/partial.py
	$(PY) bench/partition.py
	$(PY) bench/checkpoint.py
	$(PY) bench/checkpoint.py --state float32 --out bench/results/checkpoint_float32.md
	$(PY) bench/butterfly.py
	$(PY) bench/torch_redistribute.py
	$(PY) bench/torch_redistribute.py --overhead-only
	$(PY) bench/torch_redistribute.py --layouts 300
	$(PY) bench/torch_redistribute.py --dtype float32,bfloat16 --pairs-3d 30 --reps 1 --big-mib 64 --out bench/results/torch_bf16.md
	$(PY) bench/weight_sync.py --dtype float32,bfloat16
	$(PY) bench/weight_sync.py --section engines
	$(PY) bench/weight_sync.py --section m2n
	$(PY) bench/jax_eager.py
	$(PY) bench/cli_startup.py --repeat 9
	$(PY) bench/fuzz.py --inputs 12000 --seed 0 --hang 10

clean:
	rm -rf build coq/extract $(CORE_SO)
	-$(MAKE) -C coq -f CoqMakefile clean
	rm -f coq/CoqMakefile coq/CoqMakefile.conf
