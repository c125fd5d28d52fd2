"""Whether and how a server gets the receptionist's tools: `receptionist_for(config, engine,
warnings) -> ReceptionistTools | None`.

`config.receptionist_tools`: "off" -> None; "on" -> the tools, or a ValueError naming the
problem; "auto" -> the tools when the model directory has a facts.yaml and its tokenizer knows
`<tool_call>` as one token (a model trained to call them), else None; a broken fact sheet or
database then becomes a start-up warning instead of an error. The database is
`config.appointments_db` or `<model>/appointments.sqlite3`.
"""

from __future__ import annotations

from pathlib import Path

from loguru import logger

OPEN = "<tool_call>"


def trained_for_tools(engine) -> bool:
    tokenizer = getattr(engine, "tokenizer", None)
    return tokenizer is not None and len(tokenizer.encode(OPEN)) == 1


def receptionist_for(config, engine, warnings: list[str]):
    mode = config.receptionist_tools
    if mode == "off":
        return None
    facts = Path(config.model) / "facts.yaml"
    if mode == "auto" and not (facts.is_file() and trained_for_tools(engine)):
        return None
    try:
        from diffvoice.voice.receptionist.tools import ReceptionistTools

        tools = ReceptionistTools.for_model(config.model, db_path=config.appointments_db)
    except (ImportError, OSError, ValueError) as exc:
        if mode == "on":
            raise ValueError(f"receptionist_tools: {exc}") from exc
        warnings.append(f"appointment book disabled: {exc}")
        logger.warning(f"appointment book disabled: {exc}")
        return None
    logger.info(f"appointment book: {tools.book.path} ({', '.join(tools.names)})")
    return tools
