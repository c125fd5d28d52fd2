"""OpenAI-style context messages (pipecat's LLMContext, the API's request) -> the engine's chat
messages. Used by DiffusionLLMService and its drafts (voice.drafting)."""

from __future__ import annotations

from typing import Any


def context_to_messages(messages: list[dict[str, Any]], system_prompt: str | None) -> list[dict]:
    """OpenAI-style context messages -> the engine's chat messages.

    Multi-part contents keep their text parts; "developer" becomes "system"; an assistant
    message's `tool_calls` (OpenAI shape, arguments as JSON text) and `tool` messages (the
    results, `tool_call_id` kept) pass through for chat templates that render them; other
    roles and empty messages are dropped.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            ).strip()
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            out.append({"role": "assistant", "content": content or "", "tool_calls": [
                {"id": c.get("id"), "type": "function",
                 "function": {"name": c["function"]["name"],
                              "arguments": c["function"].get("arguments") or "{}"}}
                for c in calls]})
            continue
        if not isinstance(content, str) or not content:
            continue
        entry = {"role": role, "content": content}
        if role == "tool":
            entry["tool_call_id"] = message.get("tool_call_id")
        out.append(entry)
    if system_prompt and not (out and out[0]["role"] == "system"):
        out.insert(0, {"role": "system", "content": system_prompt})
    return out
