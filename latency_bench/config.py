"""`BenchConfig`: every setting of `diffvoice bench voice`, validated once.

Contract: a frozen dataclass whose fields map 1:1 onto the CLI flags (kebab-case; see
latency_bench/cli.py). `__post_init__` raises ValueError naming the field for any bad value.
Derived helpers: `turns_per_session(level)` (enough turns per level for a usable p99) and
`shared_clock` (the server runs on this machine, so its epoch timestamps share our clock).
Knows nothing about sockets or audio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

PROTOCOLS = ("browser", "twilio", "realtime")
CORPORA = ("receptionist", "paused", "mixed", "turns")   # latency_bench.corpus.corpus_for
MATRIX_AXES = ("drafting", "asr", "smart_turn", "stop_secs")
STOP_SECS_RANGE = (0.05, 5.0)            # voice.transport.protocol's per-session range
# Kokoro-82M voices that no training row of the embedded model uses (agent/train/asr_augment.py
# EVAL_KOKORO_VOICES; a test keeps them in step): never used in development, so the report's
# hold-out
HOLDOUT_VOICES: tuple[str, ...] = ("jm_kumo", "jf_gongitsune")


def parse_matrix(text: str) -> dict[str, tuple[str, ...]]:
    """ "drafting=off,on asr=pocketsphinx,tiny.en" -> {"drafting": ("off", "on"), "asr": ...}.

    drafting values are off/on (the session.start eager_drafts override); asr values are
    `diffvoice serve --asr` values (one server per value); smart_turn values are off/on
    (`diffvoice serve --smart-turn/--no-smart-turn`, one server per value); stop_secs values
    are seconds in STOP_SECS_RANGE, written back as float text ("0.20" -> "0.2"): the
    session.start override over the browser protocol, `diffvoice serve --stop-secs` (one server
    per value) over Twilio."""
    axes: dict[str, tuple[str, ...]] = {}
    for part in text.replace(";", " ").split():
        name, sep, values = part.partition("=")
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or name not in MATRIX_AXES or not vals:
            raise ValueError(f"matrix must be AXIS=V1,V2 ... with AXIS in {MATRIX_AXES}, got "
                             f"{part!r}")
        if name in axes:
            raise ValueError(f"matrix axis {name!r} given twice")
        if name in ("drafting", "smart_turn") and not set(vals) <= {"off", "on"}:
            raise ValueError(f"matrix {name} values are off/on, got {vals}")
        if name == "stop_secs":
            vals = _stop_secs_values(vals)
        if len(set(vals)) != len(vals):
            raise ValueError(f"matrix {name} values repeat: {vals}")
        axes[name] = vals
    if not axes:
        raise ValueError("matrix is empty")
    return axes


def _stop_secs_values(vals: tuple[str, ...]) -> tuple[str, ...]:
    lo, hi = STOP_SECS_RANGE
    out = []
    for value in vals:
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"matrix stop_secs values are seconds, got {value!r}") from None
        if not lo <= seconds <= hi:
            raise ValueError(f"matrix stop_secs values must be in [{lo}, {hi}], got {value}")
        out.append(str(seconds))
    return tuple(out)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class BenchConfig:
    url: str | None = None                  # None: start `diffvoice serve` on a free port
    protocol: str = "browser"
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    turns: int = 3                          # turns per session (at least)
    min_turns: int = 16                     # turns per concurrency level (at least)
    audio: str | None = None                # directory of the user's WAV/FLAC prompts
    voices: tuple[str, ...] = ("en-us", "en-us+f3", "en-gb+m3", "en-us+f2")
    speeds: tuple[int, ...] = (150, 175, 200)
    corpus_cache: str = "~/.cache/diffvoice/bench-corpus"
    stop_secs: float | None = None          # per-session override (browser protocol)
    turn_timeout_s: float = 60.0
    pause_s: float = 0.5                    # silence after hearing the answer, before next prompt
    stagger_s: float = 6.0                  # sessions start at random offsets in [0, stagger_s):
                                            # about one turn, so callers do not all finish
                                            # their first prompt in the same second
    connect_timeout_s: float = 30.0
    energy_threshold_db: float = -45.0      # bot audio above this (dBFS, 10 ms RMS) is "heard"
    bot_quiet_s: float = 1.5                # answer over after this much silence from the bot
    twilio_auth_token: str | None = None    # signs the webhook POST (env TWILIO_AUTH_TOKEN)
    seed: int = 0
    out: str = "latency-report.json"
    notes: str | None = None                # file with a paragraph to print under the table
    server_args: str = ""                   # extra flags for the spawned `diffvoice serve`
    server_log: str | None = None           # the server's JSON-lines latency log (Twilio:
                                            # its turn records; a spawned server writes one)
    server_start_timeout_s: float = 600.0
    keep_server_logs: bool = False          # keep the spawned server's output and latency logs
    progress: bool = True
    corpus: str = "receptionist"            # receptionist / paused / mixed / turns
    kokoro_voices: tuple[str, ...] = ()     # Kokoro-82M voices added to a generated corpus
    kokoro_speeds: tuple[float, ...] = (1.0, 1.15)
    holdout_voices: tuple[str, ...] = HOLDOUT_VOICES   # reported apart as the hold-out
    eager_drafts: bool | None = None        # per-session override (browser protocol)
    turn_window_secs: float | None = None   # per-session override (browser protocol)
    matrix: str | None = None               # e.g. "drafting=off,on asr=pocketsphinx,tiny.en"

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.url is not None:
            parts = urlsplit(self.url)
            allowed = (("ws", "wss") if self.protocol in ("browser", "realtime")
                       else ("ws", "wss", "http", "https"))
            if parts.scheme not in allowed or not parts.netloc:
                raise ValueError(f"url must be {'/'.join(allowed)}://host[:port]/path for the "
                                 f"{self.protocol} protocol, got {self.url!r}")
        if not self.concurrency or any(not isinstance(c, int) or c < 1
                                       for c in self.concurrency):
            raise ValueError(f"concurrency must be integers >= 1, got {self.concurrency!r}")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError(f"concurrency levels must be distinct, got {self.concurrency!r}")
        for name in ("turns", "min_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("turn_timeout_s", "connect_timeout_s", "bot_quiet_s",
                     "server_start_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("pause_s", "stagger_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        lo, hi = STOP_SECS_RANGE
        if self.stop_secs is not None and not lo <= self.stop_secs <= hi:
            raise ValueError(f"stop_secs must be in [{lo}, {hi}], got {self.stop_secs}")
        if self.stop_secs is not None and self.protocol == "twilio":
            raise ValueError("stop_secs can only be overridden per session over the browser "
                             "protocol; start the server with --stop-secs instead")
        if not -90.0 <= self.energy_threshold_db <= 0.0:
            raise ValueError(f"energy_threshold_db must be in [-90, 0], got "
                             f"{self.energy_threshold_db}")
        if not self.voices or not self.speeds:
            raise ValueError("voices and speeds must be non-empty")
        if self.corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.turn_window_secs is not None and not 0.05 <= self.turn_window_secs <= 5.0:
            raise ValueError(f"turn_window_secs must be in [0.05, 5.0], got "
                             f"{self.turn_window_secs}")
        if (self.eager_drafts is not None or self.turn_window_secs is not None
                ) and self.protocol != "browser":
            raise ValueError("eager_drafts and turn_window_secs are per-session overrides of "
                             "the browser protocol")
        if self.kokoro_voices and self.audio is not None:
            raise ValueError("kokoro_voices speak the generated corpus; --audio replaces it")
        if not self.kokoro_speeds or any(not 0.5 <= s <= 2.0 for s in self.kokoro_speeds):
            raise ValueError(f"kokoro_speeds must be multipliers in [0.5, 2.0], got "
                             f"{self.kokoro_speeds!r}")
        if self.matrix is not None:
            axes = parse_matrix(self.matrix)   # raises ValueError naming the problem
            if "drafting" in axes and self.protocol != "browser":
                raise ValueError("matrix drafting is a per-session override of the browser "
                                 "protocol")
            if "stop_secs" in axes and self.stop_secs is not None:
                raise ValueError("give stop_secs either as --stop-secs or as a matrix axis")
        if not self.out.endswith(".json"):
            raise ValueError(f"out must name a .json file, got {self.out!r}")

    @property
    def shared_clock(self) -> bool:
        """True when the server is on this machine (no --url, or a loopback --url)."""
        if self.url is None:
            return True
        host = urlsplit(self.url).hostname or ""
        return host in LOOPBACK_HOSTS or host.startswith("127.")

    def turns_per_session(self, level: int) -> int:
        return max(self.turns, math.ceil(self.min_turns / level))
