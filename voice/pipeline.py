"""Build one pipecat pipeline for one call: transport in -> ASR -> user turn (Silero VAD) ->
DiffusionLLMService -> TTS -> transport out -> assistant context.

Contract (stable; the telephony helper builds on it):

    build_pipeline(
        state: voice.state.AppState,          # shared engine, config, metrics, ASR/TTS factories
        transport: pipecat BaseTransport,     # browser (voice.browser_transport) or telephony
        *,
        session_id: str,
        on_latency: Callable[[dict], None] | None = None,
                                              # gets each per-turn latency record (a dict with the
                                              # fields of voice.protocol.Latency) after it was
                                              # written to the JSON-lines log and
                                              # state.metrics.observe_turn()
        on_event: Callable[[voice.protocol.Event], Awaitable[None]] | None = None,
                                              # browser events: Transcript, BotText,
                                              # BotStartedSpeaking/Stopped, PlaybackFlush, Latency
        stop_secs: float | None = None,       # None -> state.config.stop_secs
        audio_in_sample_rate: int = 16000,    # what the transport's input frames carry
        audio_out_sample_rate: int | None = None,  # None -> the TTS's native rate
    ) -> tuple[pipecat.pipeline.pipeline.Pipeline, pipecat.pipeline.worker.PipelineWorker]

The caller runs the worker (`await WorkerRunner(handle_sigint=False).run(worker)` or
`await worker.cancel()` to stop) and owns the transport/socket. Interruption (caller speaks
over the bot) is handled inside: engine request aborted, TTS stopped, queued audio dropped, and
`PlaybackFlush` sent through on_event (telephony serializers turn pipecat's InterruptionFrame
into their own "clear" message).

This module only wires processors together; it knows nothing about sockets or the wire
protocol's encoding.
"""
