"""Where this runs: machine, accelerator and package versions (a benchmark report's config, the
server's self-description).

Contract: `machine_info()` and `package_versions()` return small JSON-ready dicts, read from
/proc, `platform`, `nvidia-smi -L` (if present) and installed package metadata. They never import
the packages they describe (no torch import just to print its version) and never raise: a fact
that cannot be read is left out. `git_revision()` is the short commit of the working tree or None.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("diffvoice", "torch", "pipecat-ai", "faster-whisper", "ctranslate2", "pocketsphinx",
            "onnxruntime", "numpy", "websockets", "fastapi", "uvicorn", "triton")


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError):
        pass
    return None


def _gpus() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(" (UUID")[0] for line in out.stdout.splitlines() if line.strip()]


def machine_info() -> dict[str, object]:
    info: dict[str, object] = {
        "cpu": _cpu_model(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": _gpus() or "none",
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
    }
    return {k: v for k, v in info.items() if v is not None}


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def git_revision(directory: Path | None = None) -> str | None:
    directory = directory or Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
