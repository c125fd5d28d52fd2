"""Where `ServeConfig`'s values come from: config file, environment and command-line flags.

Sources, lowest precedence first: field defaults < config file (YAML or JSON object, `--config`)
< environment `DIFFVOICE_<FIELD>` (upper-case field name; `TWILIO_AUTH_TOKEN` also fills
`twilio_auth_token`) < command-line flags. Flags map 1:1 onto fields (`--stop-secs` ->
`stop_secs`) and are generated from the field metadata (`help`), so a new field needs nothing
here.

Works on the dataclass it is handed (voice.config passes ServeConfig in, so this module does not
import it); it knows nothing about the fields themselves, pipecat, the engine or sockets.
"""

from __future__ import annotations

import argparse
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from diffvoice.voice.session_limits import _split_csv


def from_sources(
    cls,
    args: argparse.Namespace | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | os.PathLike | None = None,
):
    """Merge defaults < config file < env < flags (flags the user did not pass are None)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    config_file = config_file or (getattr(args, "config", None) if args else None)
    if config_file:
        values.update(_load_file(Path(config_file)))
    for f in fields(cls):
        raw = env.get(f"DIFFVOICE_{f.name.upper()}")
        if raw is None and f.name == "twilio_auth_token":
            raw = env.get("TWILIO_AUTH_TOKEN")
        if raw is not None:
            values[f.name] = _parse(f.name, _field_type(cls, f), raw)
    if args is not None:
        for f in fields(cls):
            value = getattr(args, f.name, None)
            if value is not None:
                values[f.name] = value
    unknown = set(values) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"unknown config keys: {sorted(unknown)}")
    for name, value in list(values.items()):
        if isinstance(value, list):
            values[name] = tuple(value)
    return cls(**values)


def add_field_arguments(parser: argparse.ArgumentParser, cls) -> None:
    """One kebab-case flag per field of the dataclass `cls` (+ --config). Unset flags stay None."""
    parser.add_argument("--config", default=None, help="YAML or JSON file of ServeConfig fields")
    for f in fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = _field_type(cls, f)
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f"{f.metadata.get('help', '')} (default: {default!r})"
        if kind is bool:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif kind is tuple:
            parser.add_argument(flag, type=_split_csv, default=None, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=None, help=help_text)


# ---------------------------------------------------------------------- helpers


def _field_type(cls, f) -> type:
    hints = typing.get_type_hints(cls)
    hint = hints[f.name]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
        origin = typing.get_origin(hint)
    if origin is tuple:
        return tuple
    return hint


def _parse(name: str, kind: type, raw: str) -> Any:
    if kind is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"DIFFVOICE_{name.upper()} must be a boolean, got {raw!r}")
    if kind is tuple:
        return _split_csv(raw)
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"DIFFVOICE_{name.upper()} must be {kind.__name__}, got {raw!r}") from None


def _load_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix.lower() == ".json":
        data = json.loads(text)
    else:
        import yaml

        data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of ServeConfig fields")
    return {k.replace("-", "_"): v for k, v in data.items()}
