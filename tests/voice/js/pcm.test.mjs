// node --test for web/pcm.js: the resampler, PCM16 conversion, frame chunker and playback
// clock, checked against simple references on random (seeded) inputs.
// Run: node --test tests/voice/js/  (tests/voice/test_web_js.py runs it under pytest).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  FrameChunker,
  PlaybackClock,
  StreamingResampler,
  floatToPcm16,
  pcm16ToFloat,
} from "../../../web/pcm.js";

/** mulberry32: a small seeded PRNG so failures reproduce. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomSignal(n, rand) {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = 2 * rand() - 1;
  return x;
}

function sine(n, freq, rate, amp = 0.5) {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = amp * Math.sin((2 * Math.PI * freq * i) / rate);
  return x;
}

function concat(chunks) {
  const total = chunks.reduce((s, c) => s + c.length, 0);
  const out = new Float32Array(total);
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}

function rms(x, from = 0, to = x.length) {
  let s = 0;
  for (let i = from; i < to; i++) s += x[i] * x[i];
  return Math.sqrt(s / (to - from));
}

const RATE_PAIRS = [
  [48000, 16000],
  [44100, 16000],
  [22050, 16000],
  [8000, 16000],
  [16000, 16000],
  [96000, 16000],
];

test("chunked resampling equals one-shot resampling on random input", () => {
  const rand = rng(1234);
  for (const [inRate, outRate] of RATE_PAIRS) {
    const x = randomSignal(inRate / 4 + 37, rand);
    const whole = new StreamingResampler(inRate, outRate).process(x);
    const r = new StreamingResampler(inRate, outRate);
    const parts = [];
    let i = 0;
    while (i < x.length) {
      const n = Math.floor(rand() * 300); // includes empty and 1-sample chunks
      parts.push(r.process(x.subarray(i, i + n)));
      i += n;
    }
    const chunked = concat(parts);
    assert.equal(chunked.length, whole.length, `${inRate}->${outRate} length`);
    for (let k = 0; k < whole.length; k++) {
      assert.ok(Math.abs(chunked[k] - whole[k]) < 1e-6, `${inRate}->${outRate} sample ${k}`);
    }
  }
});

test("output count tracks input time without drift", () => {
  const rand = rng(7);
  for (const [inRate, outRate] of RATE_PAIRS) {
    const r = new StreamingResampler(inRate, outRate);
    let produced = 0;
    let received = 0;
    for (let c = 0; c < 400; c++) {
      const n = 1 + Math.floor(rand() * 256);
      produced += r.process(randomSignal(n, rand)).length;
      received += n;
      const ideal = (received * outRate) / inRate;
      // only the kernel's look-ahead (halfWidth input samples) may be outstanding
      const lag = ((r.halfWidth + 1) * outRate) / inRate + 1;
      assert.ok(produced <= ideal + 1e-9, `${inRate}->${outRate}: ahead of input`);
      assert.ok(produced >= ideal - lag, `${inRate}->${outRate}: ${produced} << ${ideal}`);
    }
  }
});

test("in-band tones come through with their amplitude and phase", () => {
  for (const [inRate, outRate] of RATE_PAIRS) {
    for (const freq of [220, 1000, 3300]) {
      const x = sine(inRate, freq, inRate); // one second
      const y = new StreamingResampler(inRate, outRate).process(x);
      const ref = sine(y.length, freq, outRate); // output n sits at input time n*in/out
      let maxErr = 0;
      // skip the first samples, where the stream starts from silence
      for (let n = 200; n < y.length; n++) maxErr = Math.max(maxErr, Math.abs(y[n] - ref[n]));
      assert.ok(maxErr < 2e-3, `${inRate}->${outRate} ${freq} Hz: max error ${maxErr}`);
    }
  }
});

test("tones above the output Nyquist are filtered, not aliased", () => {
  for (const [inRate, freq] of [[48000, 9000], [48000, 12000], [44100, 15000], [96000, 30000]]) {
    const x = sine(inRate, freq, inRate);
    const y = new StreamingResampler(inRate, 16000).process(x);
    const ratio = rms(y, 200) / rms(x);
    assert.ok(ratio < 1e-3, `${inRate} Hz, ${freq} Hz tone leaks at ${ratio} (> -60 dB)`);
  }
});

test("rejects nonsense rates", () => {
  assert.throws(() => new StreamingResampler(0, 16000), RangeError);
  assert.throws(() => new StreamingResampler(48000, Number.NaN), RangeError);
});

test("floatToPcm16 matches a scale-round-clip reference on random input", () => {
  const rand = rng(99);
  const x = new Float32Array(5000);
  for (let i = 0; i < x.length; i++) x[i] = 3 * rand() - 1.5; // about a third clip
  x[0] = 1;
  x[1] = -1;
  x[2] = 0;
  x[3] = Number.NaN;
  const pcm = floatToPcm16(x);
  for (let i = 0; i < x.length; i++) {
    const v = Number.isNaN(x[i]) ? 0 : x[i];
    const ref = Math.min(32767, Math.max(-32768, Math.round(v * 32768)));
    assert.equal(pcm[i], ref, `sample ${i} (${x[i]})`);
  }
  assert.equal(pcm[0], 32767);
  assert.equal(pcm[1], -32768);
  assert.equal(pcm[3], 0);
});

test("pcm16ToFloat reads little-endian bytes and round-trips", () => {
  const rand = rng(5);
  const values = Array.from({ length: 1000 }, () => Math.floor(rand() * 65536) - 32768);
  values.push(32767, -32768, 0, 1, -1);
  const bytes = new Uint8Array(values.length * 2);
  values.forEach((v, i) => {
    const u = v & 0xffff;
    bytes[2 * i] = u & 0xff; // low byte first
    bytes[2 * i + 1] = u >> 8;
  });
  const f = pcm16ToFloat(bytes.buffer);
  values.forEach((v, i) => assert.equal(f[i], v / 32768));
  assert.deepEqual(Array.from(floatToPcm16(f)), values); // exact round trip
  assert.throws(() => pcm16ToFloat(new ArrayBuffer(3)), RangeError);
});

test("FrameChunker re-blocks any chunking into exact frames", () => {
  const rand = rng(42);
  const x = randomSignal(10007, rand);
  const chunker = new FrameChunker(320);
  const frames = [];
  let i = 0;
  while (i < x.length) {
    const n = Math.floor(rand() * 700);
    frames.push(...chunker.push(x.subarray(i, i + n)));
    i += n;
  }
  assert.equal(frames.length, Math.floor(x.length / 320));
  frames.forEach((f) => assert.equal(f.length, 320));
  assert.deepEqual(concat(frames), x.subarray(0, frames.length * 320));
  assert.equal(chunker.filled, x.length % 320);
  assert.throws(() => new FrameChunker(0), RangeError);
});

test("PlaybackClock schedules back to back, restarts after a gap, resets on flush", () => {
  const clock = new PlaybackClock(0.05);
  const s0 = clock.schedule(1.0, 0.1);
  assert.equal(s0, 1.05); // first chunk: now + lead
  const s1 = clock.schedule(1.02, 0.1); // arrives while s0 is queued
  assert.equal(s1, s0 + 0.1); // no gap, no overlap
  const s2 = clock.schedule(1.1, 0.2);
  assert.ok(Math.abs(s2 - (s1 + 0.1)) < 1e-12);
  assert.ok(Math.abs(clock.queuedSecs(1.1) - (s2 + 0.2 - 1.1)) < 1e-12);
  const late = clock.schedule(5.0, 0.1); // the queue ran dry long ago
  assert.equal(late, 5.05);
  clock.reset();
  assert.equal(clock.queuedSecs(5.0), 0);
  assert.equal(clock.schedule(5.01, 0.1), 5.01 + 0.05); // after a flush: fresh start
  assert.throws(() => new PlaybackClock(-1), RangeError);
});
