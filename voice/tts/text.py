"""What a voice can say: the one rule the TTS services and the LLM service share.

`speakable(text)` drops control/format characters and U+FFFD; `voiceable(text)` says whether
anything is left that a voice renders as audio (a letter or digit). A reply that is not voiceable
(",", "...", "'") gives no audio from espeak-ng or Kokoro, so the LLM service treats it as no
answer and speaks its "say it again" fallback instead of leaving the bot turn silent.
"""

from __future__ import annotations

import unicodedata


def speakable(text: str) -> str:
    """Drop what a voice cannot say: control/format characters and U+FFFD (undecodable bytes)."""
    kept = (
        " " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c
        for c in text
        if c != "\ufffd"
    )
    return " ".join("".join(kept).split())


def voiceable(text: str) -> bool:
    """True when a TTS voice would render some of `text` as audio (it has a letter or digit)."""
    return any(c.isalnum() for c in speakable(text))


__all__ = ["speakable", "voiceable"]
