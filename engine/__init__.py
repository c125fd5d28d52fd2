"""diffvoice's in-process diffusion-LM inference engine.

The public names are imported lazily (PEP 562), so importing the assets module (used by
light modules such as voice.config) does not pull in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from diffvoice.engine.assets import default_model_dir

if TYPE_CHECKING:
    from diffvoice.engine.engine import Delta, Engine
    from diffvoice.engine.params import EngineConfig, SamplingParams
    from diffvoice.engine.scheduler import DraftRefused, EngineOverloaded, PriorityRefused

DEFAULT_MODEL_DIR = default_model_dir()  # see engine/assets.py: source checkout or wheel data

# name -> submodule, relative to this package
_LAZY = {"Delta": ".engine", "Engine": ".engine", "EngineConfig": ".params",
         "SamplingParams": ".params", "EngineOverloaded": ".scheduler",
         "DraftRefused": ".scheduler", "PriorityRefused": ".scheduler"}

__all__ = ["DEFAULT_MODEL_DIR", "Delta", "DraftRefused", "Engine", "EngineConfig",
           "EngineOverloaded", "PriorityRefused", "SamplingParams"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
