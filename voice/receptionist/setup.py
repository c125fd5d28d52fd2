"""Whether and how a server gets the receptionist's tools: `receptionist_for(config, engine,
warnings) -> ReceptionistTools | None`.

`config.receptionist_tools`: "off" -> None; "on" -> the tools, or a ValueError naming the
problem; "auto" -> the tools when the model directory has a facts.yaml and its tokenizer knows
`<tool_call>` as one token (a model trained to call them), else None; a broken fact sheet or
database then becomes a start-up warning instead of an error. The database is
`config.appointments_db` or the user's data directory (tools.default_book_path), printed at
start-up; who may cancel what is
`config.booking_owner_rule` (agent.owner).

`paraphrase_for(config, warnings)` is the model's paraphrase snapping (agent.paraphrase) per
`config.paraphrase`: "off" -> None; "on" -> the snap, or a ValueError naming the problem;
"auto" -> the snap when the model directory has a facts.yaml (a broken fact sheet or a missing
encoder package then becomes a start-up warning).

`agent_of(state)` is the server's agent (agent.pipeline.Agent: the snap's BEFORE rules, the
clarify guard's AFTER rules per ServeConfig.clarify*), built once per server: every voice call
and every API request answers through it (agent.pipeline.serve).
"""

from __future__ import annotations

from pathlib import Path

from loguru import logger

from diffvoice.agent.guard import guard_of
from diffvoice.agent.pipeline import Agent

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
        from diffvoice.agent.tools import ReceptionistTools

        tools = ReceptionistTools.for_model(
            config.model, db_path=config.appointments_db,
            owner_rule=getattr(config, "booking_owner_rule", "caller"),
            max_open_per_owner=getattr(config, "max_bookings_per_caller", 3))
    except (ImportError, OSError, ValueError) as exc:
        if mode == "on":
            raise ValueError(f"receptionist_tools: {exc}") from exc
        warnings.append(f"appointment book disabled: {exc}")
        logger.warning(f"appointment book disabled: {exc}")
        return None
    undone = tools.book.undo_stale()  # held by calls that died before they were confirmed
    if undone:
        logger.warning(f"appointment book: undid {undone} unconfirmed change(s) of calls that "
                       "ended without settling them")
    logger.info(f"appointment book: {tools.book.path} ({', '.join(tools.names)})")
    print(f"diffvoice: appointment book {tools.book.path} (--appointments-db to move it)",
          flush=True)
    return tools


def paraphrase_for(config, warnings: list[str]):
    mode = getattr(config, "paraphrase", "off")
    if mode == "off":
        return None
    facts = Path(config.model) / "facts.yaml"
    if mode == "auto" and not facts.is_file():
        return None
    try:
        from diffvoice.agent.paraphrase import ParaphraseSnap

        intent = getattr(config, "paraphrase_intent", None)
        snap = ParaphraseSnap.for_model(config.model, threshold=config.paraphrase_threshold,
                                        intent_threshold=None if intent is None or intent > 1
                                        else intent)
        if snap is None:
            raise ValueError(f"{facts} not found (snapping needs the model's fact sheet)")
    except (ImportError, OSError, ValueError) as exc:
        if mode == "on":
            raise ValueError(f"paraphrase: {exc}") from exc
        warnings.append(f"paraphrase snapping disabled: {exc}")
        logger.warning(f"paraphrase snapping disabled: {exc}")
        return None
    logger.info(f"paraphrase snapping: {len(snap.entries)} training questions, "
                f"threshold {snap.threshold}, intent threshold {snap.intent_threshold}, "
                f"{'no' if snap.verified is None else len(snap.verified)} verified questions")
    return snap


def agent_of(state) -> Agent:
    """The server's agent, built once and kept on `state` (see the module docstring)."""
    agent = getattr(state, "agent", None)
    if agent is None:
        guard = guard_of(state) if hasattr(state, "config") else None
        agent = Agent.of(getattr(state, "snap", None), guard)
        state.agent = agent
    return agent
