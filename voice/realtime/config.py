"""A Realtime session's configuration: what `session.update` (and `response.create`'s `response`)
may set, checked field by field, and the session object the server reports.

Contract: `SessionConfig.defaults(model=, instructions=, voice=, stop_secs=)` the config a session
starts with; `cfg.updated(obj)` -> a new SessionConfig or `RealtimeError` (nothing applied) naming
the first unusable field as `param`; `cfg.as_session(session_id)` the GA session object
(`openai.types.realtime.RealtimeSessionCreateRequest`'s shape); `response_options(obj, cfg)` the
per-response overrides. Tools come back in chat-completions form (`chat_tools`) for the engine's
constrained tool calls; their schemas are checked by the caller off the event loop
(engine.constrained.limits.check_request). Knows nothing about sockets or pipecat.

Turn detection: `server_vad` (silence_duration_ms -> the VAD's stop_secs; threshold -> its
confidence; prefix_padding_ms is accepted and reported, the VAD keeps its own pre-roll),
`semantic_vad` (eagerness -> one of the turn-end operating points in EAGERNESS: the VAD pause and
the window in which the meaning-based turn end (voice.turn_end) may wait), or null (no automatic
responses: the client asks with response.create). create_response / interrupt_response /
idle_timeout_ms are honoured.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from diffvoice.voice.realtime.audio import Format

MAX_INSTRUCTIONS_CHARS = 32_000
MAX_TOOLS = 64
MAX_OUTPUT_TOKENS = 4096
# semantic_vad eagerness -> (VAD pause stop_secs, turn window secs): high answers soonest
EAGERNESS = {"high": (0.2, 0.4), "medium": (0.3, 1.0), "auto": (0.3, 1.0), "low": (0.5, 2.0)}
UNSUPPORTED_SESSION = {  # field -> why (an error names it)
    "prompt": "stored prompts are not supported by this server",
    "reasoning": "reasoning settings are not supported by this server",
}


class RealtimeError(Exception):
    """A client mistake: becomes one `error` event (the session goes on unless `close`)."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_value",
                 kind: str = "invalid_request_error", close: int | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.kind, self.close = (
            message, param, code, kind, close)


def _bad(message: str, param: str, code: str = "invalid_value") -> RealtimeError:
    return RealtimeError(message, param=param, code=code)


@dataclass(frozen=True)
class TurnDetection:
    type: str | None = "server_vad"  # server_vad | semantic_vad | None
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 300
    eagerness: str = "auto"
    create_response: bool = True
    interrupt_response: bool = True
    idle_timeout_ms: int | None = None

    def as_dict(self) -> dict | None:
        if self.type is None:
            return None
        common = {"type": self.type, "create_response": self.create_response,
                  "interrupt_response": self.interrupt_response}
        if self.type == "semantic_vad":
            return {**common, "eagerness": self.eagerness}
        return {**common, "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms,
                "idle_timeout_ms": self.idle_timeout_ms}

    def stop_and_window(self, default_window: float) -> tuple[float, float]:
        """(VAD stop_secs, turn window secs) this turn detection asks for."""
        if self.type == "semantic_vad":
            return EAGERNESS[self.eagerness]
        stop = self.silence_duration_ms / 1000.0
        return stop, max(stop, default_window)


def _number(value: Any, param: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise _bad(f"{param} must be a number from {lo:g} to {hi:g}", param)
    return float(value)


def _bool(value: Any, param: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(f"{param} must be true or false", param)
    return value


def _turn_detection(obj: Any, current: TurnDetection, param: str) -> TurnDetection:
    if obj is None:
        return TurnDetection(type=None)
    if not isinstance(obj, dict):
        raise _bad(f"{param} must be an object or null", param)
    kind = obj.get("type", current.type or "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise _bad(f"{param}.type must be 'server_vad' or 'semantic_vad'", f"{param}.type")
    base = current if current.type == kind else TurnDetection(type=kind)
    fields: dict[str, Any] = {"type": kind}
    allowed = {"type", "create_response", "interrupt_response"} | (
        {"eagerness"} if kind == "semantic_vad" else
        {"threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms"})
    for key, value in obj.items():
        p = f"{param}.{key}"
        if key not in allowed:
            raise _bad(f"unknown field {key!r} for {kind}", p, "unknown_parameter")
        if key == "threshold":
            fields[key] = _number(value, p, 0.0, 1.0)
        elif key == "prefix_padding_ms":
            fields[key] = int(_number(value, p, 0, 5000))
        elif key == "silence_duration_ms":
            fields[key] = int(_number(value, p, 100, 5000))
        elif key == "idle_timeout_ms":
            fields[key] = None if value is None else int(_number(value, p, 5000, 30000))
        elif key == "eagerness":
            if value not in EAGERNESS:
                raise _bad(f"{p} must be one of {', '.join(EAGERNESS)}", p)
            fields[key] = value
        elif key in ("create_response", "interrupt_response"):
            fields[key] = _bool(value, p)
    return dataclasses.replace(base, **fields)


def chat_tools(tools: list[dict]) -> tuple[dict, ...]:
    """Realtime function tools -> chat-completions tools (what the engine's tool calls take)."""
    out = []
    for tool in tools:
        fn = {"name": tool["name"], "parameters": tool.get("parameters") or {"type": "object"}}
        if tool.get("description"):
            fn["description"] = tool["description"]
        out.append({"type": "function", "function": fn})
    return tuple(out)


def parse_tools(value: Any, param: str) -> tuple[dict, ...]:
    if not isinstance(value, list):
        raise _bad(f"{param} must be an array of function tools", param)
    if len(value) > MAX_TOOLS:
        raise _bad(f"at most {MAX_TOOLS} tools", param)
    seen: set[str] = set()
    tools = []
    for i, tool in enumerate(value):
        p = f"{param}[{i}]"
        if not isinstance(tool, dict):
            raise _bad("each tool must be an object", p)
        if tool.get("type") != "function":
            raise RealtimeError(f"tool type {str(tool.get('type'))[:40]!r} is not supported by "
                                "this server (only 'function' tools; no MCP)", param=f"{p}.type",
                                code="unsupported_tool_type")
        name = tool.get("name")
        if not isinstance(name, str) or not name or len(name) > 64 or not all(
                c.isalnum() or c in "_-" for c in name):
            raise _bad("a tool's name must be 1-64 letters, digits, '_' or '-'", f"{p}.name")
        if name in seen:
            raise _bad(f"two tools are named {name!r}", f"{p}.name")
        seen.add(name)
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _bad("parameters must be a JSON schema object", f"{p}.parameters")
        desc = tool.get("description")
        if desc is not None and not isinstance(desc, str):
            raise _bad("description must be a string", f"{p}.description")
        tools.append({"type": "function", "name": name, "description": desc or "",
                      "parameters": params or {"type": "object", "properties": {}}})
    return tuple(tools)


def parse_tool_choice(value: Any, tools: tuple[dict, ...], param: str) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(
            value.get("name"), str):
        if value["name"] not in {t["name"] for t in tools}:
            raise _bad(f"tool_choice names {value['name'][:64]!r}, which is not a tool", param)
        return {"type": "function", "name": value["name"]}
    raise _bad("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', "
               "'name': ...}", param)


def engine_tool_choice(choice: Any) -> Any:
    """A Realtime tool_choice -> chat-completions form."""
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def parse_modalities(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or any(m not in ("text", "audio")
                                                       for m in value):
        raise _bad(f"{param} must be ['audio'] or ['text']", param)
    return tuple(dict.fromkeys(value))


def parse_max_tokens(value: Any, param: str) -> int | str:
    if value == "inf":
        return "inf"
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise _bad(f"{param} must be an integer from 1 to {MAX_OUTPUT_TOKENS} or 'inf'", param)
    return value


def parse_instructions(value: Any, param: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_INSTRUCTIONS_CHARS:
        raise _bad(f"{param} must be a string of at most {MAX_INSTRUCTIONS_CHARS} characters",
                   param)
    return value


@dataclass(frozen=True)
class SessionConfig:
    model: str
    instructions: str | None = None
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: Format = field(default_factory=Format)
    output_format: Format = field(default_factory=Format)
    transcription: dict | None = None
    turn_detection: TurnDetection = field(default_factory=TurnDetection)
    tools: tuple[dict, ...] = ()
    tool_choice: Any = "auto"
    max_output_tokens: int | str = "inf"
    voice: str = "alloy"
    speed: float = 1.0

    @classmethod
    def defaults(cls, *, model: str, instructions: str | None, stop_secs: float) -> SessionConfig:
        return cls(model=model, instructions=instructions,
                   turn_detection=TurnDetection(silence_duration_ms=round(stop_secs * 1000)))

    def updated(self, obj: Any) -> SessionConfig:
        if not isinstance(obj, dict):
            raise _bad("session must be an object", "session")
        fields: dict[str, Any] = {}
        kind = obj.get("type", "realtime")
        if kind != "realtime":
            raise RealtimeError(f"session type {str(kind)[:40]!r} is not supported: this "
                                "server serves 'realtime' sessions (transcription sessions are "
                                "not supported)", param="session.type", code="unsupported")
        for key, value in obj.items():
            p = f"session.{key}"
            if key in ("type", "object", "id", "expires_at", "include", "tracing", "truncation",
                       "parallel_tool_calls"):
                continue  # reported as the server has them; nothing to apply
            if key in UNSUPPORTED_SESSION:
                if value is None:
                    continue
                raise RealtimeError(UNSUPPORTED_SESSION[key], param=p, code="unsupported")
            if key == "model":
                if value != self.model:
                    raise _bad(f"this session serves model {self.model!r}; connect with "
                               "?model= to choose", p)
            elif key == "instructions":
                fields["instructions"] = parse_instructions(value, p)
            elif key == "output_modalities":
                fields["output_modalities"] = parse_modalities(value, p)
            elif key == "tools":
                fields["tools"] = parse_tools(value, p)
            elif key == "tool_choice":
                fields["tool_choice"] = value  # checked below, against the tools
            elif key == "max_output_tokens":
                fields["max_output_tokens"] = parse_max_tokens(value, p)
            elif key == "audio":
                fields.update(self._audio(value))
            else:
                raise _bad(f"unknown session field {key!r}", p, "unknown_parameter")
        tools = fields.get("tools", self.tools)
        if "tool_choice" in fields or "tools" in fields:
            fields["tool_choice"] = parse_tool_choice(fields.get("tool_choice", self.tool_choice),
                                                      tools, "session.tool_choice")
        return dataclasses.replace(self, **fields)

    def _audio(self, audio: Any) -> dict:
        if not isinstance(audio, dict):
            raise _bad("audio must be an object", "session.audio")
        fields: dict[str, Any] = {}
        for side, value in audio.items():
            p = f"session.audio.{side}"
            if side not in ("input", "output"):
                raise _bad(f"unknown field {side!r}", p, "unknown_parameter")
            if not isinstance(value, dict):
                raise _bad(f"{p} must be an object", p)
            for key, item in value.items():
                q = f"{p}.{key}"
                try:
                    if key == "format":
                        fields[f"{side}_format"] = Format.parse(item)
                        continue
                except ValueError as e:
                    raise _bad(str(e), q) from None
                if side == "input" and key == "transcription":
                    if item is not None and not isinstance(item, dict):
                        raise _bad(f"{q} must be an object or null", q)
                    # any model name: this server's own recogniser transcribes
                    fields["transcription"] = None if item is None else {
                        k: item[k] for k in ("model", "language", "prompt") if k in item
                        and isinstance(item[k], str)}
                elif side == "input" and key == "turn_detection":
                    fields["turn_detection"] = _turn_detection(item, self.turn_detection, q)
                elif side == "input" and key == "noise_reduction":
                    # accepted and not applied: the session reports null (docs/realtime.md);
                    # pipecat's own Realtime example asks for near_field and treats an error
                    # event as fatal
                    if item is not None and not isinstance(item, dict):
                        raise _bad(f"{q} must be an object or null", q)
                elif side == "output" and key == "voice":
                    if not isinstance(item, (str, dict)):
                        raise _bad(f"{q} must be a voice name", q)
                    # every name is the server's one TTS voice (docs/realtime.md)
                    fields["voice"] = item if isinstance(item, str) else str(item.get("id", ""))
                elif side == "output" and key == "speed":
                    if _number(item, q, 0.25, 1.5) != 1.0:
                        raise RealtimeError("only speed 1.0 is supported by this server",
                                            param=q, code="unsupported")
                else:
                    raise _bad(f"unknown field {key!r}", q, "unknown_parameter")
        return fields

    def as_session(self, session_id: str) -> dict:
        return {
            "type": "realtime", "object": "realtime.session", "id": session_id,
            "model": self.model, "instructions": self.instructions or "",
            "output_modalities": list(self.output_modalities),
            "audio": {
                "input": {"format": self.input_format.as_dict(),
                          "transcription": self.transcription,
                          "noise_reduction": None,
                          "turn_detection": self.turn_detection.as_dict()},
                "output": {"format": self.output_format.as_dict(), "voice": self.voice,
                           "speed": self.speed},
            },
            "tools": [dict(t) for t in self.tools],
            "tool_choice": self.tool_choice,
            "max_output_tokens": self.max_output_tokens,
            "tracing": None, "truncation": "auto", "prompt": None,
        }


@dataclass(frozen=True)
class ResponseOptions:
    modalities: tuple[str, ...]
    instructions: str | None
    tools: tuple[dict, ...]
    tool_choice: Any
    max_output_tokens: int | str
    metadata: dict | None = None


def response_options(obj: Any, cfg: SessionConfig) -> ResponseOptions:
    """`response.create`'s `response` (None: the session's) -> this response's options."""
    base = ResponseOptions(cfg.output_modalities, cfg.instructions, cfg.tools, cfg.tool_choice,
                           cfg.max_output_tokens)
    if obj is None:
        return base
    if not isinstance(obj, dict):
        raise _bad("response must be an object", "response")
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        p = f"response.{key}"
        if key == "conversation":
            if value not in ("auto", None):
                raise RealtimeError("out-of-band responses (conversation 'none') are not "
                                    "supported by this server", param=p, code="unsupported")
        elif key == "input":
            raise RealtimeError("responses over custom input items are not supported by this "
                                "server", param=p, code="unsupported")
        elif key == "instructions":
            fields["instructions"] = parse_instructions(value, p)
        elif key == "output_modalities":
            fields["modalities"] = parse_modalities(value, p)
        elif key == "tools":
            fields["tools"] = parse_tools(value, p)
        elif key == "tool_choice":
            fields["tool_choice"] = value
        elif key == "max_output_tokens":
            fields["max_output_tokens"] = parse_max_tokens(value, p)
        elif key == "metadata":
            if value is not None and (not isinstance(value, dict) or len(value) > 16):
                raise _bad("metadata must be an object of at most 16 keys", p)
            fields["metadata"] = value
        elif key in ("audio", "prompt"):
            if key == "prompt" and value is not None:
                raise RealtimeError("stored prompts are not supported by this server",
                                    param=p, code="unsupported")
            if key == "audio" and value is not None:
                SessionConfig(model="")._audio({"output": value.get("output", {})}
                                               if isinstance(value, dict) else value)
        else:
            raise _bad(f"unknown response field {key!r}", p, "unknown_parameter")
    tools = fields.get("tools", base.tools)
    if "tool_choice" in fields or "tools" in fields:
        fields["tool_choice"] = parse_tool_choice(fields.get("tool_choice", "auto"), tools,
                                                  "response.tool_choice")
    return dataclasses.replace(base, **fields)
