/**
 * Pure audio arithmetic for the diffvoice page: no DOM, no Web Audio, no sockets.
 *
 * Contract:
 *  - StreamingResampler(inRate, outRate).process(Float32Array) -> Float32Array
 *    Band-limited (windowed-sinc, Blackman) resampling that keeps state across calls, so
 *    feeding a signal in chunks of any size gives exactly the samples of feeding it at once.
 *    Output sample n sits at input time n * inRate / outRate (computed from integer counters,
 *    so long streams never drift). When downsampling, the cutoff sits at 0.85 x the output
 *    Nyquist, so tones above it are strongly attenuated instead of folding back (aliasing).
 *  - floatToPcm16 / pcm16ToFloat: [-1, 1] floats <-> 16-bit signed PCM (clipping, rounding).
 *  - FrameChunker(frameSamples).push(Float32Array) -> Float32Array[] of exactly frameSamples.
 *  - PlaybackClock: when each received chunk should start so chunks play back to back.
 *
 * Used by the AudioWorklet (mic-worklet.js), the player (player.js), and `node --test`
 * (tests/voice/js/pcm.test.mjs). It must not touch browser globals.
 */

const ZERO_CROSSINGS = 16; // sinc lobes on each side of the kernel centre, in output samples
const DOWNSAMPLE_CUTOFF = 0.85; // fraction of the output Nyquist kept when downsampling
const MAX_CACHED_PHASES = 4096; // 44.1 kHz -> 16 kHz needs 160; odd rates compute on the fly

export class StreamingResampler {
  /**
   * @param {number} inRate  input sample rate in Hz (e.g. the AudioContext's 48000)
   * @param {number} outRate output sample rate in Hz (e.g. 16000)
   */
  constructor(inRate, outRate) {
    for (const [name, rate] of [["inRate", inRate], ["outRate", outRate]]) {
      if (!Number.isFinite(rate) || rate <= 0) {
        throw new RangeError(`${name} must be a positive number of Hz, got ${rate}`);
      }
    }
    this.inRate = inRate;
    this.outRate = outRate;
    this.passthrough = inRate === outRate;
    // cutoff as a fraction of the *input* Nyquist: 1 when upsampling (pure interpolation)
    this.cutoff = outRate < inRate ? (DOWNSAMPLE_CUTOFF * outRate) / inRate : 1;
    this.halfWidth = Math.ceil(ZERO_CROSSINGS / this.cutoff); // in input samples
    this.buffer = new Float32Array(0); // input samples not yet consumed
    this.bufferStart = 0; // absolute input index of buffer[0]
    this.received = 0; // absolute count of input samples received
    this.produced = 0; // absolute count of output samples produced
    this.integerRates = Number.isInteger(inRate) && Number.isInteger(outRate);
    this.phaseCache = new Map(); // phase (produced * inRate mod outRate) -> weights
  }

  /** Kernel weight at distance d input samples from the output instant. */
  kernel(d) {
    const x = d / this.halfWidth;
    if (x <= -1 || x >= 1) return 0;
    const window = 0.42 + 0.5 * Math.cos(Math.PI * x) + 0.08 * Math.cos(2 * Math.PI * x);
    const arg = Math.PI * this.cutoff * d;
    const sinc = arg === 0 ? 1 : Math.sin(arg) / arg;
    return sinc * window;
  }

  /**
   * Normalised weights for input indices centre-halfWidth+1 .. centre+halfWidth of an output
   * instant whose fractional part is frac (weights[j] multiplies index centre-halfWidth+1+j).
   * The weights sum to 1 (unit gain at DC); they depend on frac only, so with integer rates
   * the outRate/gcd distinct phases are cached.
   */
  weightsFor(frac, phaseKey) {
    const cached = phaseKey === null ? undefined : this.phaseCache.get(phaseKey);
    if (cached) return cached;
    const taps = 2 * this.halfWidth;
    const weights = new Float64Array(taps);
    let norm = 0;
    for (let j = 0; j < taps; j++) {
      weights[j] = this.kernel(frac + this.halfWidth - 1 - j);
      norm += weights[j];
    }
    for (let j = 0; j < taps; j++) weights[j] /= norm;
    if (phaseKey !== null && this.phaseCache.size < MAX_CACHED_PHASES) {
      this.phaseCache.set(phaseKey, weights);
    }
    return weights;
  }

  /**
   * @param {Float32Array} input next chunk of input samples (any length, may be empty)
   * @returns {Float32Array} every output sample that the input so far fully determines
   */
  process(input) {
    if (this.passthrough) {
      this.received += input.length;
      this.produced += input.length;
      return Float32Array.from(input);
    }
    // append input to the unconsumed history
    const merged = new Float32Array(this.buffer.length + input.length);
    merged.set(this.buffer, 0);
    merged.set(input, this.buffer.length);
    this.buffer = merged;
    this.received += input.length;

    const h = this.halfWidth;
    // how many outputs the input so far determines: centre(n) + h < received
    const out = [];
    for (;;) {
      const scaled = this.produced * this.inRate; // exact for integer rates below 2^53
      const centre = Math.floor(scaled / this.outRate);
      if (centre + h >= this.received) break; // the kernel needs input not yet received
      const phaseKey = this.integerRates ? scaled % this.outRate : null;
      const frac = this.integerRates ? phaseKey / this.outRate : scaled / this.outRate - centre;
      const weights = this.weightsFor(frac, phaseKey);
      const first = centre - h + 1; // absolute input index of weights[0]
      let acc = 0;
      for (let j = Math.max(0, -first); j < weights.length; j++) {
        acc += weights[j] * this.buffer[first + j - this.bufferStart];
      }
      out.push(acc);
      this.produced += 1;
    }
    // drop input that no future output sample can touch
    const nextCentre = Math.floor((this.produced * this.inRate) / this.outRate);
    const keepFrom = Math.max(this.bufferStart, nextCentre - h + 1);
    if (keepFrom > this.bufferStart) {
      this.buffer = this.buffer.slice(keepFrom - this.bufferStart);
      this.bufferStart = keepFrom;
    }
    return Float32Array.from(out);
  }
}

/**
 * Floats in [-1, 1] -> Int16Array: scale by 32768, round to nearest, clip to the int16 range,
 * so pcm16ToFloat(floatToPcm16(x)) returns every int16 value exactly. NaN becomes silence.
 */
export function floatToPcm16(samples) {
  const pcm = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    let s = samples[i];
    if (!(s === s)) s = 0; // NaN -> silence
    const v = Math.round(s * 32768);
    pcm[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return pcm;
}

/** Int16Array or ArrayBuffer of little-endian int16 -> Float32Array in [-1, 1). */
export function pcm16ToFloat(data) {
  let pcm;
  if (data instanceof Int16Array) {
    pcm = data;
  } else {
    if (data.byteLength % 2 !== 0) {
      throw new RangeError(`PCM16 data must be whole samples, got ${data.byteLength} bytes`);
    }
    // DataView keeps this correct (little-endian) on any host byte order
    const view = new DataView(data instanceof ArrayBuffer ? data : data.buffer,
      data.byteOffset || 0, data.byteLength);
    pcm = new Int16Array(data.byteLength / 2);
    for (let i = 0; i < pcm.length; i++) pcm[i] = view.getInt16(2 * i, true);
  }
  const out = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
  return out;
}

/** Re-blocks a stream of arbitrary-length chunks into frames of exactly `frameSamples`. */
export class FrameChunker {
  constructor(frameSamples) {
    if (!Number.isInteger(frameSamples) || frameSamples <= 0) {
      throw new RangeError(`frameSamples must be a positive integer, got ${frameSamples}`);
    }
    this.frameSamples = frameSamples;
    this.pending = new Float32Array(frameSamples);
    this.filled = 0;
  }

  /** @returns {Float32Array[]} the frames completed by this chunk (each a fresh array) */
  push(samples) {
    const frames = [];
    let offset = 0;
    while (offset < samples.length) {
      const take = Math.min(this.frameSamples - this.filled, samples.length - offset);
      this.pending.set(samples.subarray(offset, offset + take), this.filled);
      this.filled += take;
      offset += take;
      if (this.filled === this.frameSamples) {
        frames.push(this.pending);
        this.pending = new Float32Array(this.frameSamples);
        this.filled = 0;
      }
    }
    return frames;
  }
}

/**
 * Start times for a queue of chunks played back to back on one clock (seconds).
 * A chunk that arrives while the queue is still playing starts exactly where the previous
 * one ends (no gap, no overlap). One that arrives after the queue ran dry (an underrun, or
 * the first chunk of a turn) starts `leadSecs` from now, which absorbs network jitter.
 */
export class PlaybackClock {
  constructor(leadSecs = 0.05) {
    if (!Number.isFinite(leadSecs) || leadSecs < 0) {
      throw new RangeError(`leadSecs must be >= 0, got ${leadSecs}`);
    }
    this.leadSecs = leadSecs;
    this.nextStart = 0;
  }

  /** @returns {number} when a chunk of `duration` seconds arriving at `now` should start */
  schedule(now, duration) {
    let start = this.nextStart;
    if (start < now) start = now + this.leadSecs;
    this.nextStart = start + duration;
    return start;
  }

  /** Seconds of audio queued beyond `now`. */
  queuedSecs(now) {
    return Math.max(0, this.nextStart - now);
  }

  /** Forget the queue (after a flush): the next chunk starts fresh. */
  reset() {
    this.nextStart = 0;
  }
}
