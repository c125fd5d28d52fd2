"""`AppState`: what every request handler of the voice server shares, built once at start-up.

    state = AppState.create(config, engine)          # resolves ASR/TTS offline (may warn)
    state.engine      # the one in-process diffusion Engine (all sessions batch through it)
    state.config      # voice.config.ServeConfig
    state.metrics     # voice.metrics.VoiceMetrics (Prometheus), bound to the engine
    state.asr         # voice.asr.resolve.AsrBackend: .name, .warnings, .make_service() per session
    state.tts         # voice.tts.resolve.TtsBackend: .name, .sample_rate, .warnings, .make_service
    state.warnings    # start-up warnings shown to every browser session
    state.latency_log # JSON-lines writer or None
    state.llm_overrides  # extra SamplingParams fields for voice answers (e.g. {"policy": ...})
    state.receptionist   # ReceptionistTools (appointment book) for voice calls, or None
    state.client_slots   # voice.call_limits.ClientSlots (per-IP /ws session cap)
    state.session_tokens # voice.access.SessionTokens (what POST /session-token hands out)
    state.phone_admission  # serve --workers: Twilio stream claims + phone-call cap shared by
                           # every worker (voice.scale.phone_calls); None: the router's own

With `config.api_only` no ASR/TTS is loaded (asr/tts are None). Knows nothing about FastAPI.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffvoice.voice.config import ServeConfig
from diffvoice.voice.metrics import VoiceMetrics


class LatencyLog:
    """Append-only JSON-lines file of latency records (thread-safe, one line per record)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclass
class AppState:
    config: ServeConfig
    engine: Any
    metrics: VoiceMetrics
    asr: Any = None
    tts: Any = None
    warnings: list[str] = field(default_factory=list)
    latency_log: LatencyLog | None = None
    llm_overrides: dict[str, Any] = field(default_factory=dict)
    active_sessions: set[str] = field(default_factory=set)
    receptionist: Any = None  # agent.tools.ReceptionistTools (appointment book)
    snap: Any = None  # agent.paraphrase.ParaphraseSnap: the agent's BEFORE rules' (agent_of)
    agent: Any = None  # agent.pipeline.Agent every answer is served through (agent_of)
    started_at: float = field(default_factory=time.time)
    replica_id: str | None = None  # set by voice.scale when this process is one of N replicas
    client_slots: Any = None  # voice.call_limits.ClientSlots: /ws sessions per client IP
    session_tokens: Any = None  # voice.access.SessionTokens: short-lived /ws credentials
    loop_lag: Any = None  # voice.loop_lag.LoopLag, started by the app's lifespan
    readiness: Any = None  # voice.warmup.Readiness: /healthz 503 until the call path is warm
    # voice.scale.workers.WorkerAdmission when this process is one of `serve --workers N`
    shared_admission: Any = None
    # voice.scale.phone_calls.WorkerPhoneCalls with `serve --workers N` (one stream per call and
    # the phone-call cap across every worker); None: the Twilio router keeps its own
    phone_admission: Any = None

    def __post_init__(self) -> None:
        from diffvoice.voice.access import SessionTokens
        from diffvoice.voice.call_limits import ClientSlots
        from diffvoice.voice.warmup import Readiness

        if self.readiness is None:
            self.readiness = Readiness()
        if self.client_slots is None:
            self.client_slots = ClientSlots(getattr(self.config, "max_sessions_per_ip", 8))
        if self.session_tokens is None:
            self.session_tokens = SessionTokens()

    @classmethod
    def create(
        cls,
        config: ServeConfig,
        engine: Any,
        *,
        metrics: VoiceMetrics | None = None,
        asr: Any = None,
        tts: Any = None,
        llm_overrides: dict[str, Any] | None = None,
    ) -> AppState:
        metrics = metrics or VoiceMetrics()
        if engine is not None:
            metrics.bind_engine(engine)
        if not config.api_only:
            if asr is None:
                from diffvoice.voice.asr.resolve import resolve_asr

                facts = Path(config.model) / "facts.yaml"  # the model's own fact sheet
                asr = resolve_asr(
                    config.asr, config.device, facts_path=facts if facts.is_file() else None,
                    asr_prompt=config.asr_prompt, pause_secs=config.asr_pause_secs,
                    idle_pause_secs=min(config.asr_idle_pause_secs, config.asr_pause_secs),
                )
            if tts is None:
                from diffvoice.voice.tts.resolve import resolve_tts

                tts = resolve_tts(config.tts, config.tts_voice, config.tts_model_dir)
        warnings = [
            *(getattr(asr, "warnings", None) or []),
            *(getattr(tts, "warnings", None) or []),
        ]
        from diffvoice.voice.receptionist.setup import paraphrase_for

        snap = paraphrase_for(config, warnings)  # voice calls and the API alike (agent_of)
        from diffvoice.voice.receptionist.setup import receptionist_for

        # voice calls book with it; the API decodes a request's receptionist tools with its
        # served schemas (voice.openai_api.router), --api-only included
        receptionist = receptionist_for(config, engine, warnings)
        return cls(
            config=config,
            engine=engine,
            metrics=metrics,
            asr=asr,
            tts=tts,
            warnings=warnings,
            latency_log=LatencyLog(config.latency_log) if config.latency_log else None,
            llm_overrides=dict(llm_overrides or {}),
            receptionist=receptionist,
            snap=snap,
        )

    def sessions_open(self) -> int:
        """Calls open on the whole server (every worker's with --workers): what max_sessions
        caps."""
        if self.shared_admission is not None:
            return self.shared_admission.sessions_open()
        return len(self.active_sessions)

    @property
    def model_name(self) -> str:
        return str(getattr(self.engine, "model_name", None) or Path(self.config.model).name)
