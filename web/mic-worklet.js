/**
 * AudioWorklet processor "diffvoice-mic": microphone -> mono -> targetRate -> PCM16 frames.
 *
 * Runs on the audio rendering thread. Every render quantum (128 frames at the context rate,
 * the global `sampleRate`) is mixed to mono, resampled to `processorOptions.targetRate`
 * (16 kHz for the server) and cut into frames of `processorOptions.frameMs` milliseconds.
 * Each complete frame is posted to the main thread as
 *   { pcm: ArrayBuffer (int16 LE mono, transferred), level: RMS in [0, 1] }.
 * Posting "stop" on the port ends processing. The node outputs silence: it exists only to
 * be pulled by the graph. It knows nothing about sockets.
 */
import { FrameChunker, StreamingResampler, floatToPcm16 } from "./pcm.js";

class DiffvoiceMicProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate = 16000, frameMs = 20 } = options.processorOptions || {};
    this.resampler = new StreamingResampler(sampleRate, targetRate);
    this.chunker = new FrameChunker(Math.round((targetRate * frameMs) / 1000));
    this.mono = new Float32Array(128);
    this.stopped = false;
    this.port.onmessage = (event) => {
      if (event.data === "stop") this.stopped = true;
    };
  }

  process(inputs) {
    if (this.stopped) return false;
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true; // input not connected yet
    const n = channels[0].length;
    if (this.mono.length !== n) this.mono = new Float32Array(n);
    this.mono.set(channels[0]);
    for (let c = 1; c < channels.length; c++) {
      const ch = channels[c];
      for (let i = 0; i < n; i++) this.mono[i] += ch[i];
    }
    if (channels.length > 1) {
      for (let i = 0; i < n; i++) this.mono[i] /= channels.length;
    }
    for (const frame of this.chunker.push(this.resampler.process(this.mono))) {
      let energy = 0;
      for (let i = 0; i < frame.length; i++) energy += frame[i] * frame[i];
      const pcm = floatToPcm16(frame);
      this.port.postMessage({ pcm: pcm.buffer, level: Math.sqrt(energy / frame.length) }, [
        pcm.buffer,
      ]);
    }
    return true;
  }
}

registerProcessor("diffvoice-mic", DiffvoiceMicProcessor);
