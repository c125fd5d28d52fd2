/**
 * Gap-free playback of the bot's PCM16 chunks on a Web Audio context, with an instant flush.
 *
 * Contract:
 *  - new Player(audioContext, { onStats }) ; player.setRate(outputSampleRate) once the server
 *    announces it (session.started). The context may run at any rate: each chunk becomes an
 *    AudioBuffer at the server's rate and Web Audio resamples it on playback.
 *  - player.enqueue(arrayBuffer) schedules one binary frame right after the previous one
 *    (PlaybackClock), as an AudioBufferSourceNode started at an exact context time
 *    (player.lastStartTime), and returns how many seconds from now it will start sounding.
 *  - player.flush() (a server playback.flush) and player.drop() (hang-up) stop every scheduled
 *    or playing source at once and forget the queue; chunks cut this way never count as
 *    played. Only flush() counts in stats.flushes.
 *  - player.stats: chunksReceived, chunksPlayed (ended naturally), samplesPlayed, peakPlayed,
 *    chunksFlushed, flushes; player.queuedSecs(); onStats(stats) fires whenever one changes.
 *
 * Knows nothing about sockets or the protocol beyond "PCM16 mono at a given rate".
 */
import { PlaybackClock, pcm16ToFloat } from "./pcm.js";

const LEAD_SECS = 0.06; // jitter buffer before the first chunk of a burst

export class Player {
  constructor(context, { onStats = () => {} } = {}) {
    this.context = context;
    this.onStats = onStats;
    this.rate = null;
    this.clock = new PlaybackClock(LEAD_SECS);
    this.live = new Set(); // sources scheduled or playing
    this.lastStartTime = null; // context time at which the latest chunk starts
    this.output = context.createGain();
    this.output.connect(context.destination);
    this.stats = {
      chunksReceived: 0,
      chunksPlayed: 0,
      samplesPlayed: 0,
      chunksFlushed: 0,
      flushes: 0,
      peakPlayed: 0, // largest |sample| among chunks that played to the end (0 = only silence)
    };
  }

  setRate(sampleRate) {
    if (!Number.isInteger(sampleRate) || sampleRate < 3000 || sampleRate > 384000) {
      throw new RangeError(`output_sample_rate ${sampleRate} is not a usable audio rate`);
    }
    this.rate = sampleRate;
  }

  /** Seconds of bot audio still queued ahead of the context's clock. */
  queuedSecs() {
    return this.clock.queuedSecs(this.context.currentTime);
  }

  /**
   * @param {ArrayBuffer} data one binary frame: int16 little-endian mono at this.rate
   * @returns {number} seconds from now until this chunk starts sounding
   */
  enqueue(data) {
    if (this.rate === null) throw new Error("audio arrived before session.started");
    this.stats.chunksReceived += 1;
    const samples = pcm16ToFloat(data);
    if (samples.length === 0) return 0;
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.output);
    const start = this.clock.schedule(this.context.currentTime, buffer.duration);
    let peak = 0;
    for (let i = 0; i < samples.length; i++) peak = Math.max(peak, Math.abs(samples[i]));
    const entry = { source, samples: samples.length, peak, flushed: false };
    this.live.add(entry);
    source.onended = () => {
      this.live.delete(entry);
      source.disconnect();
      if (entry.flushed) return;
      this.stats.chunksPlayed += 1;
      this.stats.samplesPlayed += entry.samples;
      this.stats.peakPlayed = Math.max(this.stats.peakPlayed, entry.peak);
      this.onStats(this.stats);
    };
    source.start(start);
    this.lastStartTime = start;
    this.onStats(this.stats);
    return Math.max(0, start - this.context.currentTime);
  }

  /** playback.flush: the caller barged in. Drops everything now; returns chunks dropped. */
  flush() {
    const dropped = this.drop();
    this.stats.flushes += 1;
    this.onStats(this.stats);
    return dropped;
  }

  /** Stop every scheduled or sounding chunk and forget the queue (also used on hang-up). */
  drop() {
    const dropped = this.live.size;
    for (const entry of this.live) {
      entry.flushed = true;
      try {
        entry.source.stop();
      } catch {
        // a source that has not started yet can still be stopped; ignore an already-ended one
      }
    }
    this.live.clear();
    this.clock.reset();
    this.stats.chunksFlushed += dropped;
    this.onStats(this.stats);
    return dropped;
  }

  /** Whether any bot audio is scheduled or sounding. */
  get playing() {
    return this.live.size > 0;
  }
}
