# The README's commands. Each target sets up what it needs on a fresh machine, then runs.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
TORCH_VERSION ?= 2.13.0
# Which torch build `pip install torch==$(TORCH_VERSION)` gets depends on the index it reads:
# - empty (default): pip's configured indexes. On PyPI, torch for Linux x86_64 is the CUDA build
#   (it pulls the nvidia-* runtime wheels, several GB): right for a CUDA host. On this project's
#   build machine pip's find-links holds the local CPU wheel, so the default is the CPU build.
# - https://download.pytorch.org/whl/cpu : PyTorch's CPU wheel index, for CPU-only hosts
#   (`make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu`).
# - https://download.pytorch.org/whl/cu128 (or another cuXYZ): a specific CUDA build.
TORCH_INDEX ?=
# TORCH_INSTALL=no keeps the torch already in $(VENV) (it must satisfy pyproject's range).
TORCH_INSTALL ?= yes
HOST ?= 127.0.0.1
PORT ?= 8000
# `make test` runs the suite in this many worker processes, each module whole on one worker
# (most tests wait on real-time audio and servers: 4 workers share 2 cores well), then the
# modules marked `serial` (real-time calls across several server processes, which a machine
# this size can only serve on its own) in one process; 0 = everything in one process
TEST_WORKERS ?= 4

.PHONY: demo test setup setup-dev system-deps lint bench-engine bench-voice bench-voice-matrix bench-voice-turns bench-voice-turns-defaults clean

# The runtime venv: torch first (from TORCH_INDEX when given, see above), then the project,
# whose torch range the installed build already satisfies. Re-run whenever pyproject.toml changes.
$(VENV)/.runtime-stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	if [ "$(TORCH_INSTALL)" != no ]; then \
	  $(PIP) install -q "torch==$(TORCH_VERSION)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	fi
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

# PYTHONDONTWRITEBYTECODE is cleared for the run: every worker and every server a test starts
# imports the project's modules, and compiling them each time cost ~40% of a worker's collection
test: setup-dev system-deps
ifeq ($(TEST_WORKERS),0)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q
else
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -m "not serial" -n $(TEST_WORKERS) \
	  --dist loadfile --no-loadscope-reorder
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -m serial
endif

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

# turn-taking: the turns corpus (plain, paused, lists, slot answers) in espeak-ng and hold-out
# Kokoro voices, Smart Turn off/on x VAD pause 0.2/0.4 s, 1 and 4 callers, 60 turns a point
# (~43 min on 2 cores)
bench-voice-turns: setup system-deps
	$(VENV)/bin/diffvoice bench voice --corpus turns --kokoro-voices jm_kumo,jf_gongitsune \
	  --concurrency 1,4 --min-turns 60 --matrix "smart_turn=off,on stop_secs=0.2,0.4" \
	  --bot-quiet-s 1.0 --pause-s 0.3 --out docs/latency/voice-turns-cpu.json

# issue 42's goals at the embedded defaults, browser and Twilio callers, one run (~30 min)
bench-voice-turns-defaults: setup system-deps
	$(VENV)/bin/diffvoice bench voice --corpus turns --kokoro-voices jm_kumo,jf_gongitsune \
	  --concurrency 1,4 --min-turns 60 --bot-quiet-s 1.0 --pause-s 0.3 \
	  --out docs/latency/voice-turns-defaults-cpu.json
	$(VENV)/bin/diffvoice bench voice --protocol twilio --corpus turns \
	  --kokoro-voices jm_kumo,jf_gongitsune --concurrency 1,4 --min-turns 60 --bot-quiet-s 1.0 \
	  --pause-s 0.3 --out docs/latency/voice-turns-twilio-cpu.json

clean:
	rm -rf $(VENV) .pytest_cache
