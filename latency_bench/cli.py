"""`diffvoice bench {voice,engine,render}`: latency benchmarks that write report files.

Contract (the CLI registry in engine/cli.py maps "bench" to this module):
- `add_arguments(parser)` adds the sub-subcommands:
    voice   the end-to-end voice benchmark (flags 1:1 with latency_bench.config.BenchConfig);
            without --url it starts `diffvoice serve` on a free loopback port itself
    engine  delegated to latency_bench.engine_bench (add_arguments / run), same report format
    render  re-write the .md/.png/.html of an existing report JSON (e.g. after adding --notes)
    reliability  the reliability harness (latency_bench.reliability.cli): --short / --full
- `run(args) -> int`: 0 on success; 1 if nothing could be measured; 2 for bad arguments.
Outputs go next to --out (see latency_bench.outputs). Progress goes to stderr (tqdm).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from diffvoice.latency_bench.config import CORPORA, PROTOCOLS, BenchConfig
from diffvoice.latency_bench.server_proc import server_health

if TYPE_CHECKING:
    from diffvoice.latency_bench.corpus import Prompt

_HELP = {
    "url": "server to measure: ws://HOST:PORT/ws (browser), ws://HOST:PORT/v1/realtime "
           "(realtime), or for --protocol twilio the voice "
           "webhook http(s)://HOST/telephony/twilio/voice or a Media Streams ws(s):// URL. "
           "Default: start `diffvoice serve` on a free loopback port for the run",
    "protocol": "browser wire protocol, OpenAI Realtime (/v1/realtime) or Twilio Media Streams "
                "(over Realtime and Twilio the client measures voice_to_voice_ms; the server's "
                "stages come from its latency log, --server-log)",
    "concurrency": "comma-separated numbers of concurrent sessions to sweep, e.g. 1,2,4,8",
    "turns": "turns (prompts) per session, at least",
    "min_turns": "turns per concurrency level, at least (sessions speak more turns at low "
                 "concurrency so every level has enough samples)",
    "audio": "directory of your own .wav/.flac prompts (NAME.txt beside one = its transcript) "
             "instead of the espeak-ng corpus",
    "voices": "comma-separated espeak-ng voices for the generated corpus",
    "speeds": "comma-separated espeak-ng speeds (words per minute)",
    "corpus_cache": "where the generated prompt WAVs are cached",
    "stop_secs": "override the server's stop_secs per session (browser protocol)",
    "turn_timeout_s": "a turn not answered this many seconds after the end of speech counts "
                      "as a timeout",
    "pause_s": "silence between hearing an answer and the next prompt",
    "stagger_s": "sessions start at random offsets in [0, this) seconds; about one turn "
                 "keeps callers from all finishing their first prompt at once (a burst, not "
                 "steady concurrency)",
    "connect_timeout_s": "seconds to connect and get session.started",
    "energy_threshold_db": "bot audio louder than this (dBFS RMS over 10 ms) counts as heard",
    "bot_quiet_s": "an answer is over after this much silence from the bot (a starved server "
                   "pauses between clauses)",
    "twilio_auth_token": "sign the Twilio webhook POST with this token",
    "seed": "random seed for prompt order and start offsets",
    "out": "report JSON path; .md, -cdf.png, -concurrency.png and .html are written beside it",
    "notes": "file with a paragraph to print under the summary table",
    "server_args": "extra flags for the spawned `diffvoice serve`, e.g. \"--asr pocketsphinx\"",
    "server_log": "the server's JSON-lines latency log (`serve --latency-log`) to read each "
                  "Twilio turn's server record from (transcript, reply, endpointing, answer "
                  "ready), which Media Streams do not carry; a spawned server writes one "
                  "itself. Only for a server on this machine (same clock)",
    "keep_server_logs": "keep the spawned server's output log and latency log after the run "
                        "and print their paths (with --server-args \"--log-level DEBUG\": "
                        "each turn's decisions, to read a slow turn's cause)",
    "server_start_timeout_s": "seconds to wait for the spawned server's /healthz",
    "progress": "show a progress bar on stderr",
    "corpus": "generated prompts: receptionist (plain questions), paused (300-800 ms pauses "
              "inside the sentence: fillers and lists), mixed (both) or turns (plain, paused "
              "and booking dialogues whose second turn is a one-word slot answer)",
    "kokoro_voices": "comma-separated Kokoro-82M voices (the packaged int8 model, offline) that "
                     "also speak the generated corpus, e.g. jm_kumo,jf_gongitsune",
    "kokoro_speeds": "comma-separated Kokoro speed multipliers for --kokoro-voices",
    "holdout_voices": "voices reported apart as the hold-out (never used in development: by "
                      "default the Kokoro voices no training row of the embedded model uses); "
                      "every other voice counts as development",
    "eager_drafts": "per-session override of the server's eager drafting (browser protocol)",
    "turn_window_secs": "per-session override of the server's full silence window",
    "matrix": "sweep configurations into one report, e.g. \"drafting=off,on "
              "asr=pocketsphinx,tiny.en smart_turn=off,on stop_secs=0.2,0.4,0.6\" (one spawned "
              "server per asr x smart_turn value; drafting and, over the browser protocol, "
              "stop_secs per session; over Twilio stop_secs is a server flag); needs no --url",
}


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from exc


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers: {text!r}") from exc


def _add_voice_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = BenchConfig()
    types = {"concurrency": _int_list, "speeds": _int_list, "voices": _str_list,
             "kokoro_voices": _str_list, "holdout_voices": _str_list,
             "kokoro_speeds": _float_list}
    for f in dataclasses.fields(BenchConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name in ("progress", "keep_server_logs"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=_HELP[f.name])
            continue
        if f.name == "eager_drafts":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{_HELP[f.name]} (default: the server's)")
            continue
        if f.name == "twilio_auth_token":
            default = os.environ.get("TWILIO_AUTH_TOKEN")
        kind = types.get(f.name) or (type(default) if default is not None and f.name != "url"
                                     else str)
        if f.name in ("stop_secs", "turn_window_secs"):
            kind = float
        shown = (",".join(map(str, default)) or "none") if isinstance(default, tuple) \
            else default
        if f.name == "twilio_auth_token":
            shown = "env TWILIO_AUTH_TOKEN"
        parser.add_argument(flag, type=kind, default=default,
                            choices=PROTOCOLS if f.name == "protocol" else
                            CORPORA if f.name == "corpus" else None,
                            help=f"{_HELP[f.name]} (default: {shown})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", required=True,
                                metavar="{voice,engine,render,reliability}")
    voice = sub.add_parser("voice", help="end-to-end voice latency through a real server",
                           description="Simulated callers speak espeak-ng (and Kokoro) prompts "
                           "in real time; per-stage latency percentiles and false cut-offs over "
                           "a concurrency sweep.")
    _add_voice_arguments(voice)
    engine = sub.add_parser("engine", help="diffusion engine latency/throughput (same report "
                                           "format)")
    try:
        from diffvoice.latency_bench import engine_bench
    except ImportError:
        engine.set_defaults(engine_missing=True)
    else:
        engine_bench.add_arguments(engine)
    from diffvoice.latency_bench.reliability import cli as reliability_cli

    reliability_cli.add_arguments(sub.add_parser(
        "reliability", help="fuzz / isolation / soak / barge-in storm / admission / memory "
                            "checks through a real server (docs/reliability.md)"))
    render = sub.add_parser("render", help="re-write .md/.png/.html from a report JSON")
    render.add_argument("report", type=Path, help="report JSON (schema diffvoice.latency/1)")
    render.add_argument("--notes", type=Path, default=None,
                        help="file with a paragraph to store as the report's notes first")


def _command_line() -> str | None:
    argv = sys.argv[1:]
    return shlex.join(["diffvoice", *argv]) if argv[:1] == ["bench"] else None


def corpus_info(config: BenchConfig, prompts: Sequence[Prompt]) -> dict[str, Any]:
    """The report's `config.corpus`: where the prompts came from, how many of each kind, and
    which of its voices are hold-out (in `config.holdout_voices`) or development."""
    kinds: dict[str, int] = {}
    for prompt in prompts:
        kinds[prompt.kind] = kinds.get(prompt.kind, 0) + 1
    voices = sorted({p.voice for p in prompts if p.voice})
    info: dict[str, Any] = {"prompts": len(prompts), "kinds": kinds}
    if config.audio:
        return {"source": str(config.audio), **info}
    engines = "espeak-ng" + (" + Kokoro-82M" if config.kokoro_voices else "")
    return {"source": f"{engines} {config.corpus} prompts", **info,
            "voices": list(config.voices), "speeds": list(config.speeds),
            **({"kokoro_voices": list(config.kokoro_voices),
                "kokoro_speeds": list(config.kokoro_speeds)} if config.kokoro_voices else {}),
            "holdout_voices": [v for v in voices if v in config.holdout_voices],
            "development_voices": [v for v in voices if v not in config.holdout_voices]}


def _run_voice(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from diffvoice.latency_bench.corpus import CorpusError, corpus_for, load_audio_dir
    from diffvoice.latency_bench.load import make_report, run_sweep, total_turns
    from diffvoice.latency_bench.markdown import sweep_table
    from diffvoice.latency_bench.outputs import write_outputs
    from diffvoice.latency_bench.server_proc import ServerStartError, bench_server

    names = [f.name for f in dataclasses.fields(BenchConfig)]
    try:
        config = BenchConfig(**{name: getattr(args, name) for name in names})
        notes = Path(config.notes).read_text(encoding="utf-8").strip() if config.notes else None
        if config.audio:
            prompts = load_audio_dir(Path(config.audio))
        else:
            prompts = corpus_for(config.corpus, Path(config.corpus_cache).expanduser(),
                                 config.voices, config.speeds, config.kokoro_voices,
                                 config.kokoro_speeds)
        corpus = corpus_info(config, prompts)
    except (ValueError, OSError, CorpusError) as exc:
        print(f"diffvoice bench voice: {exc}", file=sys.stderr)
        return 2

    if config.matrix is not None:
        from diffvoice.latency_bench.matrix import run_matrix

        return run_matrix(config, prompts, corpus, notes, _command_line())

    async def sweep(url: str) -> list:
        with tqdm(total=total_turns(config), unit="turn", disable=not config.progress,
                  desc="bench voice", file=sys.stderr) as bar:
            return await run_sweep(config, url, prompts, bar)

    spawned_log = None  # the bench's own temp latency log (Twilio): removed once read
    try:
        if config.url is not None:
            url = config.url
            levels = asyncio.run(sweep(url))
            health = server_health(url)
        else:
            server, token = bench_server(config.protocol, config.server_args,
                                         config.server_start_timeout_s,
                                         config.twilio_auth_token)
            if token is not None:
                config = dataclasses.replace(config, twilio_auth_token=token)
            with server:
                url = server.bench_url(config.protocol)
                levels = asyncio.run(sweep(url))
                health = server_health(url)
                if config.keep_server_logs:
                    server.keep_log()
                    print(f"server log: {server.log_path}"
                          + (f", latency log: {server.latency_log}" if server.latency_log
                             else ""))
            if server.owns_latency_log and not config.keep_server_logs:
                spawned_log = server.latency_log
            if server.latency_log is not None:
                config = dataclasses.replace(config, server_log=str(server.latency_log))
    except ServerStartError as exc:
        print(f"diffvoice bench voice: {exc}", file=sys.stderr)
        return 1
    if config.protocol in ("twilio", "realtime") and config.server_log:
        from diffvoice.latency_bench.server_records import attach_server_records

        try:
            attached = attach_server_records(levels, Path(config.server_log))
        except OSError as exc:
            print(f"diffvoice bench voice: cannot read --server-log: {exc}", file=sys.stderr)
            return 1
        print(f"server records: {attached} of {sum(len(lv.turns) for lv in levels)} turns")
        if spawned_log is not None:
            spawned_log.unlink(missing_ok=True)
    report = make_report(config, levels, url=url, corpus=corpus, command=_command_line(),
                         server=health, notes=notes)
    written = write_outputs(report, config.out)
    print("\n".join(sweep_table(report, ["voice_to_voice_ms", "server_ms"])))
    for line in report.get("analysis", []):
        print("-", line)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    measured = sum(1 for lv in levels for t in lv.turns if t.status == "ok")
    if measured == 0:
        print("diffvoice bench voice: no turn was measured (see errors in the report)",
              file=sys.stderr)
        return 1
    return 0


def _run_render(args: argparse.Namespace) -> int:
    from diffvoice.latency_bench.outputs import write_outputs
    from diffvoice.latency_bench.report import load_report

    try:
        report = load_report(args.report)
        if args.notes is not None:
            report["notes"] = args.notes.read_text(encoding="utf-8").strip()
        written = write_outputs(report, args.report)
    except (ValueError, OSError) as exc:
        print(f"diffvoice bench render: {exc}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.bench_command == "voice":
        return _run_voice(args)
    if args.bench_command == "render":
        return _run_render(args)
    if args.bench_command == "reliability":
        from diffvoice.latency_bench.reliability import cli as reliability_cli

        return reliability_cli.run(args)
    if getattr(args, "engine_missing", False):
        print("diffvoice bench engine: latency_bench.engine_bench is not installed",
              file=sys.stderr)
        return 2
    from diffvoice.latency_bench import engine_bench
    return engine_bench.run(args)
