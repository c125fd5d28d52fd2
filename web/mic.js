/**
 * Microphone capture: getUserMedia -> MediaStreamSource -> "diffvoice-mic" AudioWorklet.
 *
 * Contract:
 *  - await Mic.open(context, { targetRate, frameMs, processing, onFrame(pcmArrayBuffer, level) })
 *    asks for the microphone (with the browser's echo cancellation, noise suppression and
 *    gain control when `processing`), loads the worklet and starts delivering PCM16 frames
 *    at targetRate. It throws MicError with a `kind` ("insecure", "denied", "no-device",
 *    "busy", "unsupported", "failed") and a message a user can act on.
 *  - mic.close() stops the worklet and releases the device (the browser's mic light goes off).
 *
 * Knows nothing about the server: the caller decides what to do with each frame.
 */

export class MicError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "MicError";
    this.kind = kind;
  }
}

/** Map a getUserMedia / worklet failure onto a message that says what to do next. */
export function describeMicFailure(err) {
  const name = err && err.name;
  if (name === "NotAllowedError" || name === "SecurityError" || name === "PermissionDeniedError") {
    return new MicError(
      "denied",
      "Microphone access was denied. Allow the microphone for this site (the icon at the left " +
        "of the address bar) and click the mic button again.",
    );
  }
  if (name === "NotFoundError" || name === "OverconstrainedError") {
    return new MicError("no-device", "No microphone was found. Plug one in and try again.");
  }
  if (name === "NotReadableError" || name === "AbortError") {
    return new MicError(
      "busy",
      "The microphone is busy or failed to start (another app may be using it). " +
        "Close the other app and try again.",
    );
  }
  return new MicError("failed", `Could not start the microphone: ${err && err.message}`);
}

export class Mic {
  constructor(context, stream, source, node) {
    this.context = context;
    this.stream = stream;
    this.source = source;
    this.node = node;
  }

  static async open(context, { targetRate = 16000, frameMs = 20, processing = true, onFrame }) {
    if (!window.isSecureContext || !navigator.mediaDevices?.getUserMedia) {
      throw new MicError(
        window.isSecureContext ? "unsupported" : "insecure",
        window.isSecureContext
          ? "This browser cannot capture audio (no getUserMedia)."
          : "The microphone only works on https:// pages or on localhost. Open this page over " +
            "HTTPS (or http://localhost) and try again.",
      );
    }
    if (!context.audioWorklet) {
      throw new MicError("unsupported", "This browser has no AudioWorklet support.");
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: {
          channelCount: 1,
          // echo cancellation keeps the bot's own voice (from speakers) out of the mic, so it
          // cannot barge in on itself; with headphones, raw capture is cleaner for the ASR
          echoCancellation: processing,
          noiseSuppression: processing,
          autoGainControl: processing,
        },
        video: false,
      });
    } catch (err) {
      throw describeMicFailure(err);
    }
    try {
      await context.audioWorklet.addModule(new URL("./mic-worklet.js", import.meta.url));
      const source = context.createMediaStreamSource(stream);
      const node = new AudioWorkletNode(context, "diffvoice-mic", {
        numberOfInputs: 1,
        numberOfOutputs: 1,
        outputChannelCount: [1],
        processorOptions: { targetRate, frameMs },
      });
      node.port.onmessage = (event) => onFrame(event.data.pcm, event.data.level);
      source.connect(node);
      // the worklet writes silence; connecting it keeps the graph pulling it every quantum
      node.connect(context.destination);
      return new Mic(context, stream, source, node);
    } catch (err) {
      for (const track of stream.getTracks()) track.stop();
      throw new MicError("failed", `Could not start audio capture: ${err.message}`);
    }
  }

  close() {
    this.node.port.postMessage("stop");
    this.node.port.onmessage = null;
    try {
      this.source.disconnect();
      this.node.disconnect();
    } catch {
      // already disconnected
    }
    for (const track of this.stream.getTracks()) track.stop();
  }
}
