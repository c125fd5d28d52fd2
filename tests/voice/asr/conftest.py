"""ASR test fixtures: one pocketsphinx backend (domain LM) per test session — building its
decoder takes seconds on the 2-core box; every test leaves the pool as it found it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pocketsphinx_backend():
    from diffvoice.voice.asr.resolve import resolve_asr

    backend = resolve_asr("pocketsphinx", "cpu")
    assert backend.name == "pocketsphinx:en-us+domain-lm", backend.warnings
    return backend
