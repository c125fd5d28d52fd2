/**
 * The diffvoice page: wires the mic (mic.js), the WebSocket session (session.js) and the
 * player (player.js) to the DOM, and keeps everything the page shows in one `state` object.
 *
 * `window.diffvoice` exposes that state read-only-by-convention for tests and debugging:
 *   status        "idle" | "connecting" | "listening" | "stopped" | "error"
 *   session       the session.started event (model, asr, tts, rates, stop_secs, warnings)
 *   transcripts   every transcript event {text, final}; finalTranscripts: the final texts
 *   interim       the current interim hypothesis ("" when none)
 *   botTurns      [{text, interrupted}] one per bot answer (bot.text deltas appended)
 *   audio         {chunksReceived, chunksPlayed, samplesPlayed, peakPlayed, chunksFlushed,
 *                  flushes, framesSent, framesDropped}: bot audio chunks received / played to
 *                  the end / cut by a flush, server-ordered flushes, mic frames sent / dropped
 *   latency       the "latency" events, each with browser_ms added (null when unknown)
 *   errors        "error" events; notice: {kind, message} of the banner shown, or null
 *   eventCounts   number of events received per type
 *   agent         GET /agent: the business and example questions shown, or undefined
 * It knows the protocol only through session.js and the event names.
 */
import { Mic, MicError } from "./mic.js";
import { Player } from "./player.js";
import { Session, SessionError, sessionUrl } from "./session.js";

const $ = (id) => document.getElementById(id);
const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);

const state = {
  status: "idle",
  session: null,
  warnings: [],
  transcripts: [],
  finalTranscripts: [],
  interim: "",
  botTurns: [],
  botSpeaking: false,
  audio: {
    chunksReceived: 0,
    chunksPlayed: 0,
    samplesPlayed: 0,
    chunksFlushed: 0,
    flushes: 0,
    peakPlayed: 0,
    framesSent: 0,
    framesDropped: 0,
  },
  latency: [],
  errors: [],
  notice: null,
  eventCounts: {},
};
window.diffvoice = state;

let context = null; // one AudioContext for capture and playback, made on the first click
let player = null;
let session = null;
let mic = null;
let botTurnOpen = false; // bot.text appends to the last bot turn until the user speaks again
let turnAudibleAtMs = null; // epoch ms when this turn's first answer audio starts playing

// ---------------------------------------------------------------- rendering

const STATUS_TEXT = {
  idle: ["Start talking", "Click the mic to start a conversation."],
  connecting: ["Connecting…", "Connecting to the server and the microphone…"],
  listening: ["Stop", "Listening. Speak, then pause; the agent answers when you stop."],
  speaking: ["Stop", "The agent is speaking. Talk over it to interrupt."],
  stopped: ["Start talking", "Session ended. Click the mic to start a new one."],
  error: ["Try again", "Something went wrong; see the message below."],
};

function renderStatus() {
  const shown = state.status === "listening" && state.botSpeaking ? "speaking" : state.status;
  const [label, line] = STATUS_TEXT[shown];
  const button = $("mic");
  button.dataset.state = shown;
  button.setAttribute("aria-pressed", String(state.status === "listening"));
  button.disabled = state.status === "connecting";
  $("mic-label").textContent = label;
  $("mic-state").textContent = line;
  document.body.dataset.status = shown;
}

function showNotice(kind, message) {
  state.notice = message ? { kind, message } : null;
  const el = $("notice");
  el.hidden = !message;
  el.textContent = message || "";
  el.dataset.kind = kind || "";
}

function renderWarnings() {
  const list = $("warnings");
  list.replaceChildren(
    ...state.warnings.map((w) => Object.assign(document.createElement("li"), { textContent: w })),
  );
  list.hidden = state.warnings.length === 0;
}

function renderSessionInfo() {
  const s = state.session;
  const live = state.status === "listening";
  $("info-server").textContent = s
    ? `${session.url} · session ${s.session_id}${live ? "" : " (ended)"}`
    : "not connected";
  $("info-model").textContent = s ? s.model : "—";
  $("info-asr").textContent = s ? s.asr : "—";
  $("info-tts").textContent = s ? s.tts : "—";
  $("info-stop").textContent = s ? `${fmtSecs(s.stop_secs)}` : "—";
  $("info-audio").textContent = s
    ? `mic ${s.input_sample_rate} Hz → server → ${s.output_sample_rate} Hz · ` +
      `${state.audio.framesSent} frames sent, ${state.audio.chunksPlayed} played, ` +
      `${state.audio.flushes} flushes`
    : "—";
  $("info-rtt").textContent = session && session.rttMs !== null ? fmtMs(session.rttMs) : "—";
}

/** The conversation log: one <li> per user or bot turn, plus the interim hypothesis. */
function renderLog() {
  const items = [];
  let u = 0;
  let b = 0;
  for (const entry of conversationOrder) {
    const li = document.createElement("li");
    if (entry === "user") {
      li.className = "turn user";
      li.textContent = state.finalTranscripts[u++];
    } else {
      const turn = state.botTurns[b++];
      li.className = turn.interrupted ? "turn bot interrupted" : "turn bot";
      li.textContent = turn.text;
    }
    items.push(li);
  }
  if (state.interim) {
    const li = document.createElement("li");
    li.className = "turn user interim";
    li.textContent = state.interim;
    items.push(li);
  }
  $("log").replaceChildren(...items);
  $("log-empty").hidden = items.length > 0;
  items.at(-1)?.scrollIntoView?.({ block: "nearest" });
}
const conversationOrder = []; // "user" | "bot" in the order the turns began

function renderHud() {
  const rows = state.latency.map((rec) => {
    const tr = document.createElement("tr");
    if (rec.interrupted) tr.className = "interrupted";
    const cells = [
      rec.interrupted ? `${rec.turn} (interrupted)` : String(rec.turn),
      fmtSecs(rec.stop_secs),
      fmtMs(rec.endpointing_ms),
      fmtMs(rec.asr_ms),
      fmtMs(rec.llm_ttft_ms),
      fmtMs(rec.tts_first_audio_ms),
      fmtMs(rec.server_ms),
      fmtMs(rec.browser_ms),
    ];
    cells.forEach((text, i) => {
      const td = document.createElement(i === 0 ? "th" : "td");
      if (i === 0) td.scope = "row";
      td.textContent = text;
      tr.append(td);
    });
    return tr;
  });
  $("hud-body").replaceChildren(...rows);
  $("hud-empty").hidden = rows.length > 0;
}

function fmtMs(ms) {
  return typeof ms === "number" && Number.isFinite(ms) ? `${Math.round(ms)} ms` : "—";
}

function fmtSecs(s) {
  return typeof s === "number" ? `${s.toFixed(2)} s` : "—";
}

function setStatus(status) {
  state.status = status;
  renderStatus();
  renderSessionInfo();
}

// ---------------------------------------------------------------- protocol events

function onEvent(event) {
  state.eventCounts[event.type] = (state.eventCounts[event.type] || 0) + 1;
  switch (event.type) {
    case "session.started":
      state.session = event;
      state.warnings = Array.isArray(event.warnings) ? event.warnings.map(String) : [];
      renderWarnings();
      renderSessionInfo();
      break;
    case "transcript":
      state.transcripts.push({ text: event.text, final: Boolean(event.final) });
      if (event.final) {
        state.interim = "";
        if (event.text.trim()) {
          // one final per speech segment: a turn with pauses has several, shown as one message
          const last = conversationOrder.length - 1;
          if (last >= 0 && conversationOrder[last] === "user") {
            const u = state.finalTranscripts.length - 1;
            state.finalTranscripts[u] = `${state.finalTranscripts[u]} ${event.text}`;
          } else {
            state.finalTranscripts.push(event.text);
            conversationOrder.push("user");
          }
        }
        botTurnOpen = false; // the next bot text starts a new answer
        turnAudibleAtMs = null;
      } else {
        state.interim = event.text;
      }
      renderLog();
      break;
    case "bot.text":
      if (!botTurnOpen) {
        state.botTurns.push({ text: "", interrupted: false });
        conversationOrder.push("bot");
        botTurnOpen = true;
      }
      state.botTurns.at(-1).text += event.text;
      renderLog();
      break;
    case "bot.started_speaking":
    case "bot.stopped_speaking":
      state.botSpeaking = event.type === "bot.started_speaking";
      renderStatus();
      break;
    case "playback.flush":
      if (player) player.flush();
      if (botTurnOpen && state.botTurns.length) state.botTurns.at(-1).interrupted = true;
      botTurnOpen = false;
      state.botSpeaking = false;
      renderLog();
      renderStatus();
      break;
    case "latency":
      state.latency.push({ ...event, browser_ms: browserMs(event.vad_stop_t) });
      renderHud();
      break;
    case "error":
      state.errors.push({ code: event.code, message: event.message });
      showNotice("server-error", `Server error (${event.code}): ${event.message}`);
      break;
    case "pong":
      renderSessionInfo();
      break;
    default:
      console.info("diffvoice: ignoring unknown event", event.type);
  }
}

/** ms from the server's VAD stop to audible answer here; only meaningful on one clock. */
function browserMs(vadStopT) {
  if (!LOOPBACK.has(location.hostname) || typeof vadStopT !== "number") return null;
  if (turnAudibleAtMs === null) return null;
  const ms = turnAudibleAtMs - vadStopT * 1000;
  return ms >= 0 ? ms : null;
}

function onAudio(data) {
  if (!player) return;
  const startsInSecs = player.enqueue(data);
  if (turnAudibleAtMs === null) {
    turnAudibleAtMs = Date.now() + startsInSecs * 1000;
    // the latency event may have arrived before the first audio chunk of its turn
    const last = state.latency.at(-1);
    if (last && last.browser_ms === null && !last.interrupted) {
      last.browser_ms = browserMs(last.vad_stop_t);
      renderHud();
    }
  }
}

function onPlayerStats(stats) {
  Object.assign(state.audio, stats);
  renderSessionInfo();
}

function onClose({ byUser, message }) {
  if (byUser) return;
  teardown();
  // an "error" event already explains closes the server initiated for a reason
  if (!state.notice || state.notice.kind !== "server-error") showNotice("dropped", message);
  setStatus("error");
}

// ---------------------------------------------------------------- start / stop

// settings come from the form, or from the URL (?stop_secs=0.6&mic_processing=0) for links
const query = new URLSearchParams(location.search);
if (query.has("stop_secs")) $("stop-secs").value = query.get("stop_secs");
if (query.get("mic_processing") === "0") $("mic-processing").checked = false;

function sessionConfig() {
  const raw = $("stop-secs").value;
  return raw ? { stop_secs: Number(raw) } : {};
}

async function start() {
  showNotice(null, null);
  setStatus("connecting");
  // made inside the click handler: browsers only let a user gesture start audio output
  if (!context) context = new AudioContext({ latencyHint: "interactive" });
  const resumed = context.resume();
  if (!player) player = new Player(context, { onStats: onPlayerStats });
  session = new Session(sessionUrl(location), { onEvent, onAudio, onClose });
  try {
    await resumed;
    const started = await session.start(sessionConfig());
    player.setRate(started.output_sample_rate);
    mic = await Mic.open(context, {
      targetRate: started.input_sample_rate,
      frameMs: 20,
      processing: $("mic-processing").checked,
      onFrame: onMicFrame,
    });
    setStatus("listening");
  } catch (err) {
    teardown();
    if (err instanceof MicError || err instanceof SessionError) {
      showNotice(err.kind, err.message);
    } else {
      showNotice("failed", `Could not start: ${err.message}`);
      console.error(err);
    }
    setStatus("error");
  }
}

function onMicFrame(pcm, level) {
  const outcome = session ? session.sendAudio(pcm) : "closed";
  if (outcome === "sent") state.audio.framesSent += 1;
  else if (outcome === "dropped") state.audio.framesDropped += 1;
  $("meter-fill").style.transform = `scaleX(${Math.min(1, level * 4).toFixed(3)})`;
}

function teardown() {
  if (mic) mic.close();
  mic = null;
  if (session) session.close();
  state.botSpeaking = false;
  $("meter-fill").style.transform = "scaleX(0)";
}

function stop() {
  teardown();
  if (player) player.drop(); // silence at once; not a server-ordered flush
  setStatus("stopped");
}

$("mic").addEventListener("click", () => {
  if (state.status === "listening") stop();
  else if (state.status !== "connecting") start();
});

renderStatus();

/** Who the page talks to (GET /agent): the business of the model's fact sheet and three example
 * questions; nothing is shown for a model without one, or when the request fails. */
async function showAgent() {
  let card;
  try {
    const response = await fetch("/agent", { cache: "no-store" });
    if (!response.ok) return;
    card = await response.json();
  } catch {
    return;
  }
  if (!card || !card.business) return;
  const who = card.assistant ? `${card.assistant}, the receptionist of` : "The receptionist of";
  $("agent-name").textContent = `You are talking to ${who} ${card.business} (${card.kind}).`;
  const list = $("agent-examples");
  for (const example of card.examples || []) {
    const item = document.createElement("li");
    item.textContent = `“${example}”`;
    list.appendChild(item);
  }
  $("agent-card").hidden = false;
  state.agent = card;
}

showAgent();
