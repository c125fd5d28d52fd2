# The README's commands. Each target sets up what it needs on a fresh machine, then runs.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
TORCH_VERSION ?= 2.13.0
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test setup setup-dev system-deps lint bench-engine bench-voice bench-voice-matrix clean

# The runtime venv: torch first (the CPU wheel on CPU-only hosts, so pip never pulls a CUDA
# build), then the project. Re-run whenever pyproject.toml changes.
$(VENV)/.runtime-stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==$(TORCH_VERSION)"
	$(PIP) install -q -e .
	touch $@

$(VENV)/.dev-stamp: $(VENV)/.runtime-stamp
	$(PIP) install -q -e ".[dev,ray]"
	touch $@

setup: $(VENV)/.runtime-stamp
setup-dev: $(VENV)/.dev-stamp

# Debian packages the tests use: espeak-ng/sox make spoken test audio, chromium runs the page,
# node runs the page's JavaScript unit tests.
system-deps:
	@missing=""; \
	command -v espeak-ng >/dev/null || missing="$$missing espeak-ng"; \
	command -v sox >/dev/null || missing="$$missing sox"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v node >/dev/null || missing="$$missing nodejs"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: setup
	$(VENV)/bin/diffvoice serve --host $(HOST) --port $(PORT)

test: setup-dev system-deps
	$(PY) -m pytest -q

lint: setup-dev
	$(VENV)/bin/ruff check .

bench-engine: setup
	$(VENV)/bin/diffvoice bench engine --context 128,1024,4096 --out docs/latency/engine-cpu.json

bench-voice: setup system-deps
	$(VENV)/bin/diffvoice bench voice --concurrency 1,2,4,8,16 --min-turns 32 --out docs/latency/voice-cpu.json

# drafting off/on x pocketsphinx/Whisper tiny.en, 1 and 4 callers, one report (~12 min on 2 cores)
bench-voice-matrix: setup system-deps
	$(VENV)/bin/diffvoice bench voice --matrix "drafting=off,on asr=pocketsphinx,whisper-tiny.en" \
	  --concurrency 1,4 --min-turns 16 --corpus mixed --bot-quiet-s 1.0 --pause-s 0.3 \
	  --out docs/latency/voice-drafting-cpu.json

clean:
	rm -rf $(VENV) .pytest_cache
