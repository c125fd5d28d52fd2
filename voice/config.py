"""`ServeConfig`: every setting of `diffvoice serve`, one frozen dataclass that validates itself.

The per-client limits, keepalive and loop diagnostics fields live in its base class
(voice.session_limits.SessionLimits); `--help` lists them first.

Sources, lowest precedence first: field defaults < config file < environment
`DIFFVOICE_<FIELD>` < command-line flags, merged by voice.config_sources (`from_sources`). Flags
map 1:1 onto fields (`--stop-secs` -> `stop_secs`) and are generated from the field metadata by
`add_arguments`, so a new field is one line here.

This module knows nothing about pipecat, the engine or sockets.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from diffvoice.agent.owner import OWNER_RULES
from diffvoice.agent.thresholds import CLARIFY_BELOW, INTENT_PROBABILITY, PARAPHRASE_SIMILARITY
from diffvoice.engine.assets import default_model_dir, web_dir
from diffvoice.voice import config_sources
from diffvoice.voice.session_limits import SessionLimits, _help, _split_csv
from diffvoice.voice.transport.protocol import STOP_SECS_RANGE

INPUT_FRAME_MS = (32, 64, 96, 128)  # whole 32 ms VAD windows (voice.transport.vad_aligned)

DEFAULT_MODEL_DIR = default_model_dir()  # engine/assets.py: source checkout or wheel data
DEFAULT_WEB_DIR = web_dir()
ASR_CHOICES_HELP = (
    '"auto" (best measured for the device), "whisper" / "whisper-tiny.en" / "whisper-base" '
    "(packaged models), a faster-whisper model name in the HF cache, a local CTranslate2 dir, "
    '"pocketsphinx" (domain LM) or "pocketsphinx-general"'
)
TTS_CHOICES = ("espeak", "kokoro", "piper")
DEVICES = ("auto", "cpu", "cuda")
RECEPTIONIST_TOOLS = ("auto", "on", "off")

DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly phone receptionist. Answer in one or two short spoken sentences, "
    "without lists, markdown or emoji."
)


@dataclass(frozen=True)
class ServeConfig(SessionLimits):
    host: str = field(default="127.0.0.1", metadata=_help("interface to listen on"))
    port: int = field(default=8000, metadata=_help("TCP port (0 picks a free one)"))
    model: str = field(
        default=str(DEFAULT_MODEL_DIR),
        metadata=_help("diffusion model directory loaded by the engine"),
    )
    device: str = field(
        default="auto", metadata=_help("engine and ASR device: auto (CUDA when present), cpu, cuda")
    )
    asr: str = field(default="auto", metadata=_help(f"speech recognizer: {ASR_CHOICES_HELP}"))
    asr_prompt: str = field(
        default="off",
        metadata=_help(
            "whisper decoding prompt: off (default), auto (the receptionist's domain words from "
            "the model's facts.yaml, when it has one; docs/voice.md 'Domain prompt'), or the "
            "prompt text itself"
        ),
    )
    tts: str = field(default="espeak", metadata=_help("speech synthesizer: espeak, kokoro, piper"))
    tts_voice: str | None = field(
        default=None,
        metadata=_help("voice name (espeak: en-us; kokoro: af_heart; piper: en_US-ryan-high)"),
    )
    tts_model_dir: str | None = field(
        default=None,
        metadata=_help(
            "kokoro: dir with kokoro-v1.0.onnx + voices-v1.0.bin (default "
            "~/.cache/pipecat/kokoro-onnx); piper: dir with <voice>.onnx + .onnx.json "
            "(default ~/.cache/pipecat/piper)"
        ),
    )
    stop_secs: float = field(
        default=0.2,
        metadata=_help(
            "seconds of silence after which the Silero VAD reports a pause; the turn ends then "
            "if the transcript is a complete utterance (and its draft is ready), else at "
            "turn_window_secs"
        ),
    )
    vad_min_volume: float = field(
        default=0.5,
        metadata=_help(
            "the Silero VAD's loudness gate (pipecat's min_volume: 0 silent .. 1 loud, its "
            "smoothed BS.1770 loudness over 400 ms): pipecat's 0.6 rises too slowly for one "
            "short word ('yes'), which then never starts a turn, most often over the phone "
            "(docs/latency/turn-taking.md)"
        ),
    )
    asr_pause_secs: float = field(
        default=0.2,
        metadata=_help(
            "whisper: a recognition pass runs at once when the caller's audio has been quiet "
            "this long, so the transcript (and its answer draft) is ready when the VAD's "
            "stop_secs pause ends the turn; at most stop_secs"
        ),
    )
    asr_idle_pause_secs: float = field(
        default=0.1,
        metadata=_help(
            "whisper: the same, while this is the only call using the recogniser (an early "
            "pass then costs no other call); a value above asr_pause_secs counts as "
            "asr_pause_secs (off) (docs/latency/turn-taking.md)"
        ),
    )
    input_frame_ms: int = field(
        default=32,
        metadata=_help(
            "caller audio enters the pipeline in frames of this many ms (32, 64, 96 or 128: "
            "whole 32 ms VAD windows); larger frames cost the event loop less per open "
            "microphone and decide speech / silence up to (frame - 32) ms later"
        ),
    )
    smart_turn: bool = field(
        default=False,
        metadata=_help(
            "weigh the sound of the caller's turn too (pipecat's bundled Smart Turn v3.2, one "
            "shared ONNX session): complete words wait when it says the caller is mid-thought"
        ),
    )
    turn_window_secs: float = field(
        default=1.0,
        metadata=_help(
            "longest silence, from the caller's end of speech, before a turn ends anyway "
            "(pauses inside a sentence stay shorter); equal to stop_secs: plain silence "
            "endpointing"
        ),
    )
    eager_drafts: bool = field(
        default=True,
        metadata=_help(
            "draft answers at low priority from interim transcripts while the caller speaks; "
            "a draft whose text matches the final transcript is spoken at once"
        ),
    )
    draft_stable_secs: float = field(
        default=0.15,
        metadata=_help("an interim transcript unchanged this long gets a draft"),
    )
    system_prompt: str = field(
        default=DEFAULT_SYSTEM_PROMPT, metadata=_help("system prompt for every call")
    )
    max_new_tokens: int = field(default=48, metadata=_help("token budget of one spoken answer"))
    steps_per_block: int = field(
        default=4, metadata=_help("denoising passes per block (more = better, slower)")
    )
    max_sessions: int = field(
        default=32, metadata=_help("concurrent browser/phone sessions; more are refused")
    )
    max_phone_calls: int | None = field(
        default=None,
        metadata=_help("concurrent Twilio phone calls (they also count against max_sessions; "
                       "they are exempt from max_sessions_per_ip); more are refused (busy "
                       "TwiML, stream 1013). Default: half of max_sessions (at least 1), so "
                       "phone streams alone cannot lock browser callers out"),
    )
    latency_log: str | None = field(
        default=None, metadata=_help("append one JSON line per bot turn to this file")
    )
    web_dir: str = field(default=str(DEFAULT_WEB_DIR), metadata=_help("static page served at /"))
    public_url: str | None = field(
        default=None, metadata=_help("public https URL of this server (Twilio webhooks)")
    )
    twilio_auth_token: str | None = field(
        default=None, metadata=_help("Twilio auth token (env TWILIO_AUTH_TOKEN)", secret=True)
    )
    twilio_validate: bool = field(
        default=True, metadata=_help("check X-Twilio-Signature on Twilio webhooks")
    )
    twilio_claims_db: str | None = field(
        default=None,
        metadata=_help("SQLite file of the CallSids whose stream was opened, kept across "
                       "restarts so a replayed signed webhook opens nothing (default: the "
                       "user's data directory, one file per Twilio auth token)"),
    )
    status_callback_log: str | None = field(
        default=None, metadata=_help("append Twilio status callbacks as JSON lines to this file")
    )
    api_only: bool = field(
        default=False,
        metadata=_help("serve only the OpenAI-compatible API (no ASR/TTS/voice pipeline)"),
    )
    api_keys: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "comma-separated bearer tokens accepted by /v1 (empty: no auth)", secret=True
        ),
    )
    # --- slow request bodies, Host allow-list, proxy headers (issue 54; voice.http_limits,
    # voice.api_guard): checked in _check_http_guards ---
    body_timeout_s: float = field(
        default=15.0,
        metadata=_help("seconds an HTTP request body may take to arrive whole, counted from the "
                       "end of its headers (a stalled or trickling body included); past it the "
                       "request is answered 408 body_timeout, or its connection closed when "
                       "the answer went out already"),
    )
    max_pending_bodies_per_ip: int = field(
        default=16,
        metadata=_help("HTTP requests one client IP may have with a body still arriving; one "
                       "more is answered 429 too_many_pending_bodies at once, so slow bodies "
                       "from one address cannot use up --connection-headroom"),
    )
    allowed_hosts: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "comma-separated extra names the Host header may carry (without --api-keys, every "
            "HTTP and WebSocket request with another Host gets 421 host_not_allowed: the DNS "
            "rebinding guard). Always allowed: localhost, IP addresses, --host and the host of "
            "--public-url; '*' turns the check off"
        ),
    )
    forwarded_allow_ips: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "comma-separated proxy addresses (IPs or networks, '*' for any) whose "
            "X-Forwarded-For / X-Forwarded-Proto headers set the client address; default none: "
            "the peer's own address counts for every per-IP limit. Behind a reverse proxy or a "
            "local tunnel (ngrok, cloudflared) on this machine: 127.0.0.1"
        ),
    )
    # /v1 clients share the engine with live calls, which come first (engine.scheduler)
    api_client_concurrency: int = field(
        default=8, metadata=_help("/v1 requests one client (API key, else IP) may have in "
                                  "flight; one more gets 429 (0: no limit)")
    )
    api_client_tokens_per_min: int = field(
        default=600_000,
        metadata=_help("tokens (max_tokens + prompt characters / 4) one /v1 client may ask "
                       "for per minute; past it 429 with Retry-After (0: no limit)"),
    )
    reserved_slots: int = field(
        default=2, metadata=_help("engine slots (and queue places) only live calls may take: "
                                  "/v1 requests leave them free")
    )
    # receptionist tools (voice/receptionist/): the appointment book for voice calls
    receptionist_tools: str = field(
        default="auto",
        metadata=_help(
            "check_availability / book_appointment / cancel_appointment on voice calls: auto "
            "(when the model dir has facts.yaml and its tokenizer a <tool_call> token), on, off"
        ),
    )
    appointments_db: str | None = field(
        default=None,
        metadata=_help("SQLite appointment book (default: in the user's data directory, "
                       "~/.local/share/diffvoice/<model name>/appointments.sqlite3 on Linux; "
                       "printed at start-up)"),
    )
    max_bookings_per_caller: int = field(
        default=3,
        metadata=_help("open (future, not cancelled) visits one caller may hold in the "
                       "appointment book; one more is refused in words the agent speaks"),
    )
    booking_owner_rule: str = field(
        default="caller",
        metadata=_help("who may cancel a booking: caller (only the phone number or browser "
                       "session that made it) or any (anyone who names it and its day); "
                       "docs/tool-calling.md 'Who may cancel what'"),
    )
    # clarify guard (agent/guard.py): a short clarifying question instead of an
    # unsure or blended reply, on voice calls and the OpenAI API
    clarify: str = field(
        default="auto",
        metadata=_help("ask a clarifying question when the engine is unsure: auto (when the "
                       "model dir has facts.yaml: the receptionist), on, off"),
    )
    clarify_below: float = field(
        default=CLARIFY_BELOW,
        metadata=_help("clarify when the reply's first block was committed with a lowest "
                       "token probability below this (0 = only for replies not well-formed)"),
    )
    clarify_whole_reply: bool = field(
        default=True,
        metadata=_help("also hold each reply until complete and clarify when it is not "
                       "well-formed (costs the reply's remaining blocks before speech starts)"),
    )
    # paraphrase snapping (agent/paraphrase.py): a caller's first message heard as the
    # nearest training question of the receptionist's fact sheet, on voice calls and the API
    paraphrase: str = field(
        default="auto",
        metadata=_help("hear a caller's first message as the nearest question the model was "
                       "trained on (all-MiniLM-L6-v2 similarity): auto (when the model dir has "
                       "facts.yaml: the receptionist), on, off"),
    )
    paraphrase_threshold: float = field(
        default=PARAPHRASE_SIMILARITY,
        metadata=_help("cosine similarity at or above which paraphrase snapping swaps the "
                       "message for its nearest fact / small-talk training question"),
    )
    paraphrase_intent: float = field(
        default=INTENT_PROBABILITY,
        metadata=_help("intent snapping (with paraphrase snapping): the intent head's "
                       "probability at or above which a message is heard as a training question "
                       "of its intent with the same service and day, and a later turn naming no "
                       "value as the training follow-up of its intent; above 1 = off"),
    )
    workers: int = field(
        default=1,
        metadata=_help("server processes on this machine, all accepting on --port (engine + ASR "
                       "+ TTS + calls each; --max-sessions and --max-sessions-per-ip hold for "
                       "all of them together; voice.scale.workers)"),
    )
    # --- scale-out on Ray Serve (voice.scale; needs the `ray` extra) ---
    ray: bool = field(
        default=False,
        metadata=_help("serve through Ray Serve: replicas of the whole stack behind one endpoint"),
    )
    replicas: int = field(
        default=1, metadata=_help("Ray Serve replicas (engine + ASR + TTS + calls each)")
    )
    max_replicas: int | None = field(
        default=None,
        metadata=_help("autoscale between --replicas and this many on ongoing sessions"),
    )
    cpus_per_replica: float = field(
        default=1.0, metadata=_help("CPUs Ray reserves per replica (also its torch threads)")
    )
    gpus_per_replica: float = field(
        default=0.0, metadata=_help("GPUs Ray reserves per replica (fractions share a GPU)")
    )
    ray_address: str | None = field(
        default=None,
        metadata=_help('Ray cluster to join ("auto", "ray://host:10001"); default: start one'),
    )
    # --- OpenAI API naming (vLLM's --served-model-name) ---
    served_model_name: str | None = field(
        default=None,
        metadata=_help(
            "model name(s) the /v1 API lists and answers to, comma-separated (default: the "
            "model directory's name)"
        ),
    )

    def __post_init__(self) -> None:
        if self.receptionist_tools not in RECEPTIONIST_TOOLS:
            raise ValueError(
                f"receptionist_tools must be one of {RECEPTIONIST_TOOLS}, got "
                f"{self.receptionist_tools!r}"
            )
        self._check_limits()
        self._check_http_guards()
        if self.booking_owner_rule not in OWNER_RULES:
            raise ValueError(f"booking_owner_rule must be one of {OWNER_RULES}, got "
                             f"{self.booking_owner_rule!r}")
        if self.clarify not in RECEPTIONIST_TOOLS or not 0 <= self.clarify_below <= 1:
            raise ValueError(f"clarify must be one of {RECEPTIONIST_TOOLS} and clarify_below in "
                             f"[0, 1], got {self.clarify!r} / {self.clarify_below!r}")
        if self.paraphrase not in RECEPTIONIST_TOOLS or not 0 <= self.paraphrase_threshold <= 1 \
                or not 0 <= self.paraphrase_intent:
            raise ValueError(f"paraphrase must be one of {RECEPTIONIST_TOOLS}, "
                             f"paraphrase_threshold in [0, 1] and paraphrase_intent >= 0, got "
                             f"{self.paraphrase!r} / {self.paraphrase_threshold!r} / "
                             f"{self.paraphrase_intent!r}")
        if not self.host:
            raise ValueError("host must not be empty")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port!r}")
        if not self.model:
            raise ValueError("model must name a model directory")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if not self.asr:
            raise ValueError(f"asr must be {ASR_CHOICES_HELP}")
        if not isinstance(self.asr_prompt, str) or not self.asr_prompt.strip():
            raise ValueError("asr_prompt must be auto, off or a prompt text")
        if self.tts not in TTS_CHOICES:
            raise ValueError(f"tts must be one of {TTS_CHOICES}, got {self.tts!r}")
        lo, hi = STOP_SECS_RANGE
        if not isinstance(self.stop_secs, (int, float)) or not lo <= self.stop_secs <= hi:
            raise ValueError(f"stop_secs must be in [{lo}, {hi}], got {self.stop_secs!r}")
        if not isinstance(self.vad_min_volume, (int, float)) or not (
            0.0 <= self.vad_min_volume <= 1.0
        ):
            raise ValueError(f"vad_min_volume must be in [0, 1], got {self.vad_min_volume!r}")
        if not isinstance(self.asr_pause_secs, (int, float)) or not (
            0.05 <= self.asr_pause_secs <= self.stop_secs
        ):
            raise ValueError(f"asr_pause_secs must be in [0.05, stop_secs={self.stop_secs}], "
                             f"got {self.asr_pause_secs!r}")
        if not isinstance(self.asr_idle_pause_secs, (int, float)) or not (
            0.05 <= self.asr_idle_pause_secs <= self.stop_secs
        ):
            raise ValueError(f"asr_idle_pause_secs must be in [0.05, stop_secs={self.stop_secs}]"
                             f", got {self.asr_idle_pause_secs!r}")
        if self.input_frame_ms not in INPUT_FRAME_MS:
            raise ValueError(f"input_frame_ms must be one of {INPUT_FRAME_MS}, got "
                             f"{self.input_frame_ms!r}")
        if not isinstance(self.turn_window_secs, (int, float)) or not (
            self.stop_secs <= self.turn_window_secs <= hi
        ):
            raise ValueError(
                f"turn_window_secs must be in [stop_secs={self.stop_secs}, {hi}], got "
                f"{self.turn_window_secs!r}"
            )
        if not isinstance(self.draft_stable_secs, (int, float)) or not (
            0.0 <= self.draft_stable_secs <= 5.0
        ):
            raise ValueError(
                f"draft_stable_secs must be in [0, 5], got {self.draft_stable_secs!r}"
            )
        if not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= 1024:
            raise ValueError(f"max_new_tokens must be in [1, 1024], got {self.max_new_tokens!r}")
        if not isinstance(self.steps_per_block, int) or self.steps_per_block < 1:
            raise ValueError(f"steps_per_block must be >= 1, got {self.steps_per_block!r}")
        if not isinstance(self.max_sessions, int) or self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions!r}")
        if self.max_phone_calls is not None and (
            isinstance(self.max_phone_calls, bool) or not isinstance(self.max_phone_calls, int)
            or not 1 <= self.max_phone_calls <= self.max_sessions
        ):
            raise ValueError(f"max_phone_calls must be an integer in [1, max_sessions="
                             f"{self.max_sessions}], got {self.max_phone_calls!r}")
        if isinstance(self.max_bookings_per_caller, bool) or not isinstance(
                self.max_bookings_per_caller, int) or self.max_bookings_per_caller < 1:
            raise ValueError(f"max_bookings_per_caller must be an integer >= 1, got "
                             f"{self.max_bookings_per_caller!r}")
        for name in ("api_client_concurrency", "api_client_tokens_per_min", "reserved_slots"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if isinstance(self.api_keys, str):
            object.__setattr__(self, "api_keys", _split_csv(self.api_keys))
        if not all(isinstance(k, str) and k for k in self.api_keys):
            raise ValueError("api_keys must be non-empty strings")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) \
                or not 1 <= self.workers <= 64:
            raise ValueError(f"workers must be an integer in 1..64, got {self.workers!r}")
        if self.workers > 1 and self.ray:
            raise ValueError("workers > 1 and ray do not mix: Ray Serve runs --replicas")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas!r}")
        if self.max_replicas is not None and (
            not isinstance(self.max_replicas, int) or self.max_replicas < self.replicas
        ):
            raise ValueError(
                f"max_replicas must be an int >= replicas ({self.replicas}), "
                f"got {self.max_replicas!r}"
            )
        if not isinstance(self.cpus_per_replica, (int, float)) or self.cpus_per_replica <= 0:
            raise ValueError(f"cpus_per_replica must be > 0, got {self.cpus_per_replica!r}")
        if not isinstance(self.gpus_per_replica, (int, float)) or self.gpus_per_replica < 0:
            raise ValueError(f"gpus_per_replica must be >= 0, got {self.gpus_per_replica!r}")
        if self.public_url is not None and not self.public_url.startswith(("http://", "https://")):
            raise ValueError(
                f"public_url must start with http:// or https://, got {self.public_url!r}"
            )
        if self.served_model_name is not None and not _split_csv(self.served_model_name):
            raise ValueError("served_model_name must name at least one model, got "
                             f"{self.served_model_name!r}")

    def _check_http_guards(self) -> None:
        for name in ("allowed_hosts", "forwarded_allow_ips"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, _split_csv(getattr(self, name)))
        if isinstance(self.body_timeout_s, bool) or not isinstance(
                self.body_timeout_s, (int, float)) or not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be a number > 0, got {self.body_timeout_s!r}")
        if isinstance(self.max_pending_bodies_per_ip, bool) or not isinstance(
                self.max_pending_bodies_per_ip, int) or self.max_pending_bodies_per_ip < 1:
            raise ValueError(f"max_pending_bodies_per_ip must be an integer >= 1, got "
                             f"{self.max_pending_bodies_per_ip!r}")
        for host in self.allowed_hosts:
            bare = host.strip("[]")
            if host != "*" and ("/" in host or ":" in bare and not _is_ip(bare)):
                raise ValueError(f"allowed_hosts entries must be host names or IP addresses (no "
                                 f"scheme, port or path) or '*', got {host!r}")
        for address in self.forwarded_allow_ips:
            if address == "*":
                continue
            try:
                ipaddress.ip_network(address, strict=False)
            except ValueError:
                raise ValueError(f"forwarded_allow_ips entries must be IP addresses, networks or "
                                 f"'*', got {address!r}") from None

    def replace(self, **changes: Any) -> ServeConfig:
        return replace(self, **changes)

    def public_dict(self) -> dict[str, Any]:
        """Settings safe to log or show (secrets masked)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = "***" if f.metadata.get("secret") and value else value
        return out

    # ------------------------------------------------------------------ sources

    @classmethod
    def from_sources(
        cls,
        args: argparse.Namespace | None = None,
        env: Mapping[str, str] | None = None,
        config_file: str | os.PathLike | None = None,
    ) -> ServeConfig:
        """Merge defaults < config file < env < flags (flags the user did not pass are None)."""
        return config_sources.from_sources(cls, args, env, config_file)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One kebab-case flag per ServeConfig field (+ --config). Unset flags stay None."""
    config_sources.add_field_arguments(parser, ServeConfig)
