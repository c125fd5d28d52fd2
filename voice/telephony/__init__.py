"""Phone calls into the shared voice pipeline (Twilio Media Streams).

- ``signature``: Twilio's X-Twilio-Signature algorithm and our per-call stream token.
- ``twiml``: the TwiML documents we answer with.
- ``handshake``: sans-I/O parsing of a Media Stream's ``connected``/``start`` messages.
- ``playout``: joins Twilio ``mark`` echoes to latency records (when the caller heard the bot).
- ``media_stream``: pipecat serializer/transport for one call.
- ``config``: TelephonyConfig (read from ServeConfig) and the start-up banner.
- ``twilio``: ``make_router(state) -> APIRouter`` with the webhook, stream and status routes.

Nothing in this package builds pipelines or talks to the engine directly: each call's pipeline
comes from ``voice.pipeline.build_pipeline``.
"""

from diffvoice.voice.telephony.config import webhook_banner

__all__ = ["webhook_banner"]
