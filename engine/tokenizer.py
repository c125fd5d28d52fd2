"""Chat tokenizer from a checkpoint's own files, and incremental detokenisation for streaming.

ChatTokenizer reads tokenizer.json (via `tokenizers`), or rebuilds it from vocab.json + merges.txt
(engine.bpe_files), and tokenizer_config.json (chat template, eos/mask tokens); it renders the chat
template with jinja2 the way transformers does, template kwargs (tools, enable_thinking) included.
It knows nothing about models or decoding. Detokenizer turns committed ids into text deltas that
never end in broken UTF-8 or half a word.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from diffvoice.engine.bpe_files import tokenizer_from_bpe_files

# Tokenizer.dropped's marker: an invisible separator no template trims, lower-cases or escapes
_MARK = "\u2063"
_MARKED = re.compile(f"{_MARK}(\\d+){_MARK}")
MASK_TOKEN_CANDIDATES = ("<|mask|>", "<|mdm_mask|>", "|<MASK>|", "<MASK>", "[MASK]", "<mask>")


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


class ChatTokenizer:
    def __init__(self, tokenizer: Tokenizer, chat_template: str | None, special: dict[str, str],
                 source: str = "tokenizer"):
        self.tokenizer = tokenizer
        self.special = special
        self.source = source
        if chat_template is None:
            raise ValueError(f"{source}: tokenizer_config.json has no chat_template")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env.globals["raise_exception"] = raise_exception
        self.template = env.from_string(chat_template)

    @classmethod
    def from_dir(cls, path: str | Path) -> ChatTokenizer:
        path = Path(path)
        tok_file = path / "tokenizer.json"
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        if tok_file.is_file():
            tokenizer = Tokenizer.from_file(str(tok_file))
        else:  # only the slow tokenizer's files: rebuild it (engine.bpe_files)
            tokenizer = tokenizer_from_bpe_files(path, cfg)
        template = cfg.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)
        jinja_file = path / "chat_template.jinja"
        if jinja_file.is_file():  # transformers: the file takes priority over the config entry
            template = jinja_file.read_text()
        map_file = path / "special_tokens_map.json"  # transformers' fallback for these names
        special_map = json.loads(map_file.read_text()) if map_file.is_file() else {}
        special = {k: _token_text(cfg.get(k)) or _token_text(special_map.get(k))
                   for k in ("bos_token", "eos_token", "pad_token", "mask_token")}
        return cls(tokenizer, template, {k: v for k, v in special.items() if v},
                   source=str(cfg_file))

    def token_id(self, text: str | None) -> int | None:
        return None if text is None else self.tokenizer.token_to_id(text)

    def mask_token_id(self) -> int | None:
        for text in (self.special.get("mask_token"), *MASK_TOKEN_CANDIDATES):
            tid = self.token_id(text)
            if tid is not None:
                return tid
        return None

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               **template_kwargs) -> str:
        """The chat template rendered as transformers' apply_chat_template(tokenize=False) does;
        `template_kwargs` (e.g. tools=[...], enable_thinking=False) become template variables."""
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content'")
        variables = {"bos_token": self.special.get("bos_token", ""),
                     "eos_token": self.special.get("eos_token", ""),
                     "pad_token": self.special.get("pad_token", ""),
                     "mask_token": self.special.get("mask_token", "")}
        variables.update(template_kwargs)
        return self.template.render(messages=messages,
                                    add_generation_prompt=add_generation_prompt, **variables)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tokenize: bool = True, **template_kwargs) -> list[int] | str:
        """transformers-style entry point: ids (tokenize=True) or the rendered text."""
        text = self.render(messages, add_generation_prompt, **template_kwargs)
        return self.encode(text) if tokenize else text

    def end_of_turn_ids(self) -> list[int]:
        """The special token the chat template writes right after an assistant message's content
        (ChatML's <|im_end|>, LLaDA's <|eot_id|>): what the model was trained to emit to end its
        turn. Found by rendering a one-exchange conversation; [] if the template will not render
        it or writes plain text there."""
        sentinel = "\u2063diffvoice-end-of-turn-probe\u2063"
        try:
            text = self.render([{"role": "user", "content": "hi"},
                                {"role": "assistant", "content": sentinel}],
                               add_generation_prompt=False)
        except Exception:  # noqa: BLE001 - a template may insist on other roles; then no probe
            return []
        if sentinel not in text:
            return []
        added = {t.content for t in self.tokenizer.get_added_tokens_decoder().values()}
        after = self.encode(text.split(sentinel, 1)[1])[:1]  # LLaDA's template goes on with a
        return [t for t in after if self.tokenizer.id_to_token(t) in added]  # header: 1 token

    def dropped(self, messages: list[dict]) -> dict[str, int]:
        """How many messages with text the chat template leaves out of the prompt, by role
        ("system", "history" for earlier user/assistant/tool turns). Each such message's text is
        replaced by a numbered marker and the conversation rendered once: a message whose
        marker is not in the prompt was left out. Linear in the conversation (one render, one
        scan), where looking for each text in the real prompt was messages x prompt."""
        marked = []
        for i, m in enumerate(messages):
            if isinstance(m, dict) and str(m.get("content") or "").strip():
                m = {**m, "content": f"{_MARK}{i}{_MARK}"}
            marked.append(m)
        seen = {int(n) for n in _MARKED.findall(self.render(marked))}
        out: dict[str, int] = {}
        for i, m in enumerate(messages):
            if marked[i] is not m and i not in seen:
                key = "system" if m.get("role") in ("system", "developer") else "history"
                out[key] = out.get(key, 0) + 1
        return out

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_chat(self, messages: list[dict], **template_kwargs) -> list[int]:
        return self.encode(self.render(messages, **template_kwargs))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


class Detokenizer:
    """Turns a growing list of committed ids into text deltas.

    A delta never ends inside a UTF-8 sequence or inside a word: text after the last whitespace is
    held back until more ids arrive or `flush()` is called at the end of the answer. Byte tokens
    that never form valid UTF-8 (an untrained model emits them) are dropped, not replaced.
    """

    def __init__(self, tokenizer: ChatTokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def _delta(self, final: bool) -> str:
        text = self.tokenizer.decode(self.ids)
        if not final:  # a trailing partial UTF-8 sequence may still be completed
            text = text.rstrip("\ufffd")
        text = text.replace("\ufffd", "")  # bytes that are not UTF-8 never reach the caller
        if not final:  # hold back a word that the next block may continue
            cut = max(text.rfind(" "), text.rfind("\n"))
            text = text[:cut] if cut > 0 else ""
        if not text.startswith(self.emitted) or len(text) <= len(self.emitted):
            return ""
        delta, self.emitted = text[len(self.emitted):], text
        return delta

    def feed(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        return self._delta(final=False)

    def flush(self) -> str:
        return self._delta(final=True)
