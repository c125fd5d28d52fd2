"""diffvoice's in-process diffusion-LM inference engine."""

from pathlib import Path

from engine.engine import Delta, Engine
from engine.params import EngineConfig, SamplingParams
from engine.scheduler import DraftRefused, EngineOverloaded

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "receptionist-tiny"

__all__ = ["DEFAULT_MODEL_DIR", "Delta", "DraftRefused", "Engine", "EngineConfig",
           "EngineOverloaded", "SamplingParams"]
