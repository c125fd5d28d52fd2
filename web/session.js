/**
 * WebSocket client for the diffvoice browser protocol (docs/protocol.md, voice/protocol.py).
 *
 * Contract:
 *  - sessionUrl(location) -> "ws(s)://<same host>/ws" (wss when the page is https), plus
 *    "?token=..." when the page's own URL carries one (servers started with --api-keys).
 *  - const s = new Session(url, { onEvent, onAudio, onClose });
 *    const started = await s.start(config)   // resolves with the session.started event
 *    Sends {"type":"session.start","config":...} first, before any audio, as the protocol
 *    requires. Rejects with SessionError kind "unreachable" (no connection), "rejected" (the
 *    server closed before session.started, e.g. overloaded) or "timeout".
 *  - After start: onEvent(event) for every JSON event, onAudio(ArrayBuffer) for every binary
 *    frame (PCM16 at started.output_sample_rate), onClose({code, reason, byUser, message}) once.
 *  - s.sendAudio(pcmArrayBuffer) -> "sent" | "dropped" | "closed": drops the frame (and counts
 *    it) while the socket is backed up, so a slow link never builds seconds of hidden latency.
 *  - s.close() ends the session normally (code 1000). s.rttMs is the last ping round trip.
 *
 * Knows nothing about audio devices or the DOM.
 */

const START_TIMEOUT_MS = 120000; // the server may warm models on the first session
const PING_EVERY_MS = 5000;
const MAX_BUFFERED_BYTES = 32000; // ~1 s of 16 kHz PCM16 waiting in the socket

export class SessionError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "SessionError";
    this.kind = kind;
  }
}

export function sessionUrl(loc) {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  // With --api-keys the server wants a credential; a page opened as /?token=<session token>
  // (from POST /session-token) passes it on, since browsers cannot set WebSocket headers.
  const token = new URLSearchParams(loc.search || "").get("token");
  return `${scheme}//${loc.host}/ws` + (token ? `?token=${encodeURIComponent(token)}` : "");
}

/** What a close code means to the person using the page. */
export function describeClose(code, reason) {
  const why = reason ? ` (${reason})` : "";
  switch (code) {
    case 1000:
      return `The server ended the session${why}.`;
    case 1001:
      return `The server is going away (restart or shutdown)${why}. Click the mic to reconnect.`;
    case 1003:
    case 1007:
    case 1008:
      return `The server rejected this page's data (close code ${code})${why}.`;
    case 1012:
      return `The server is restarting${why}. Click the mic to reconnect in a moment.`;
    case 1011:
      return `The server hit an internal error${why}. Click the mic to start a new session.`;
    case 1013:
      return `The server is at capacity${why}. Try again in a moment.`;
    default:
      return (
        `The connection to the server dropped (close code ${code})${why}. ` +
        "Check that the server is still running, then click the mic to reconnect."
      );
  }
}

export class Session {
  constructor(url, { onEvent = () => {}, onAudio = () => {}, onClose = () => {} } = {}) {
    this.url = url;
    this.onEvent = onEvent;
    this.onAudio = onAudio;
    this.onClose = onClose;
    this.ws = null;
    this.started = null;
    this.closedByUser = false;
    this.framesSent = 0;
    this.framesDropped = 0;
    this.rttMs = null;
    this.pingTimer = null;
    this.pingSentAt = null;
  }

  start(config = {}) {
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (kind, message) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(new SessionError(kind, message));
      };
      const timer = setTimeout(() => {
        fail("timeout", `The server at ${this.url} did not start a session within ` +
          `${START_TIMEOUT_MS / 1000} s.`);
        this.ws.close(1000, "start timeout");
      }, START_TIMEOUT_MS);
      let opened = false;
      try {
        this.ws = new WebSocket(this.url);
      } catch (err) {
        fail("unreachable", `Cannot open ${this.url}: ${err.message}`);
        return;
      }
      this.ws.binaryType = "arraybuffer";
      this.ws.onopen = () => {
        opened = true;
        this.ws.send(JSON.stringify({ type: "session.start", config }));
      };
      this.ws.onmessage = (message) => {
        if (typeof message.data !== "string") {
          if (this.started) this.onAudio(message.data);
          return;
        }
        let event;
        try {
          event = JSON.parse(message.data);
        } catch {
          console.warn("diffvoice: ignoring a text frame that is not JSON", message.data);
          return;
        }
        if (event.type === "pong" && this.pingSentAt !== null) {
          this.rttMs = performance.now() - this.pingSentAt;
          this.pingSentAt = null;
        }
        if (event.type === "session.started" && !settled) {
          settled = true;
          clearTimeout(timer);
          this.started = event;
          this.pingTimer = setInterval(() => this.ping(), PING_EVERY_MS);
          resolve(event);
        }
        this.onEvent(event);
      };
      this.ws.onclose = (close) => {
        clearInterval(this.pingTimer);
        if (!settled) {
          if (!opened) {
            fail("unreachable", `Cannot reach the voice server at ${this.url}. Is ` +
              "`diffvoice serve` running, and is this the address it listens on?");
          } else {
            fail("rejected", describeClose(close.code, close.reason));
          }
          return;
        }
        this.onClose({
          code: close.code,
          reason: close.reason,
          byUser: this.closedByUser,
          message: describeClose(close.code, close.reason),
        });
      };
      // onerror carries no detail in browsers; onclose always follows it
      this.ws.onerror = () => {};
    });
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  /** @returns {"sent" | "dropped" | "closed"} what happened to this frame */
  sendAudio(pcm) {
    if (!this.open || !this.started) return "closed";
    if (this.ws.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.framesDropped += 1;
      return "dropped";
    }
    this.ws.send(pcm);
    this.framesSent += 1;
    return "sent";
  }

  ping() {
    if (!this.open) return;
    this.pingSentAt = performance.now();
    this.ws.send(JSON.stringify({ type: "ping" }));
  }

  close() {
    this.closedByUser = true;
    clearInterval(this.pingTimer);
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000, "user ended");
  }
}
