"""The reliability harness's parts and the counts of each scale: plain data, importable without the
harness's own dependencies (websockets, soundfile), so `diffvoice bench`'s parser can name them."""

from __future__ import annotations

from typing import Any

PARTS = ("fuzz", "isolation", "attacks", "siege", "storm", "admission", "memory", "soak",
         "realtime")

SCALES: dict[str, dict[str, Any]] = {
    "short": {
        "name": "short", "max_sessions": 8, "max_phone_calls": 3, "per_ip": 3,
        "idle_timeout_s": 3.0,
        "handshake_timeout_s": 2.0, "header_timeout_s": 2.0, "max_new_tokens": 12,
        "fuzz_inputs": 300, "fuzz_schemas": 40, "fuzz_min_total": 300, "fuzz_concurrency": 3,
        "fuzz_mid_calls": 5,
        "fuzz_media_calls": 1, "fuzz_legit_calls": 1, "fuzz_legit_turns": 1,
        "iso_bad_requests": 8, "iso_huge_prompts": 1, "iso_flood_sockets": 6,
        "iso_legit_turns": 1,
        "atk_quiet_turns": 0, "atk_legit_turns": 1, "atk_warmup": False, "atk_innocent": 4,
        "atk_hostile": 2, "atk_concurrency": 4, "atk_flood_sockets": 1, "atk_flood_frames": 200,
        "atk_replays": 2, "atk_phone_extra": 1, "atk_slow_heads": 20, "atk_slow_upgrades": 10,
        "atk_bad_utf8": 3, "atk_booking_attempts": 4,
        "sg_flood": 12, "sg_long_tokens": 64, "sg_flood_s": 30.0, "sg_unread": 6,
        "sg_unread_ips": 2, "sg_n1": 2, "sg_slow_bodies": 24, "sg_silent_streams": 10,
        "sg_body_timeout_s": 5.0, "sg_flood_close_s": 10.0, "sg_silent_browsers": 8,
        "sg_cut_bodies": 5, "sg_probe_s": 1.0, "sg_n6_ips": 1, "api_client_concurrency": 8,
        "storm_sessions": 1, "storm_interruptions": 2,
        "mem_warmup": 1, "mem_sessions": 2, "mem_concurrency": 2,
        "soak_callers": 2, "soak_s": 10, "soak_pause_s": 1.0, "soak_call_turns": 1,
        "soak_ramp_s": 2.0, "soak_warmup_s": 3.0, "soak_procs": 1,
        "rt_malformed": 300, "rt_sockets": 3, "rt_send_rate": 50.0, "rt_busy_responses": 1,
        "rt_audio_responses": 1, "rt_live_turns": 1, "rt_idle_sockets": 2,
        # memory per session is judged by the full run (test_reliability_short leaves the RSS
        # goal to it, as for /ws): a few sessions here only show they open and close
        "rt_mem_warmup": 10, "rt_mem_sessions": 10, "rt_mem_concurrency": 2,
        "part_timeout_s": 150,
    },
    "full": {
        "name": "full", "max_sessions": 40, "max_phone_calls": 20, "per_ip": 4,
        "idle_timeout_s": 10.0,
        "handshake_timeout_s": 5.0, "header_timeout_s": 10.0, "max_new_tokens": 48,
        "fuzz_inputs": 10_000, "fuzz_schemas": 2_000, "fuzz_min_total": 10_000,
        "fuzz_concurrency": 16,
        "fuzz_mid_calls": 100, "fuzz_media_calls": 10, "fuzz_legit_calls": 2,
        "fuzz_legit_turns": 6,
        "iso_bad_requests": 200, "iso_huge_prompts": 20, "iso_flood_sockets": 200,
        "iso_legit_turns": 8,
        "atk_quiet_turns": 8, "atk_legit_turns": 3, "atk_warmup": True, "atk_innocent": 50,
        "atk_hostile": 10, "atk_concurrency": 8, "atk_flood_sockets": 4,
        "atk_flood_frames": 2000, "atk_replays": 40, "atk_phone_extra": 10,
        "atk_slow_heads": 300, "atk_slow_upgrades": 200, "atk_bad_utf8": 50,
        "atk_booking_attempts": 6,
        "sg_flood": 80, "sg_long_tokens": 900, "sg_flood_s": 120.0, "sg_unread": 100,
        "sg_unread_ips": 13, "sg_n1": 8, "sg_slow_bodies": 200, "sg_silent_streams": 200,
        "sg_body_timeout_s": 15.0, "sg_flood_close_s": 10.0, "sg_silent_browsers": 30,
        "sg_cut_bodies": 50, "sg_probe_s": 1.0, "sg_n6_ips": 4, "api_client_concurrency": 8,
        "storm_sessions": 4, "storm_interruptions": 100,
        "mem_warmup": 80, "mem_sessions": 200, "mem_concurrency": 8,
        "soak_callers": 32, "soak_s": 600, "soak_pause_s": 20.0, "soak_call_turns": 4,
        "soak_ramp_s": 60.0, "soak_warmup_s": 120.0, "soak_procs": 2,
        "rt_malformed": 2_400, "rt_sockets": 8, "rt_send_rate": 12.0, "rt_busy_responses": 6,
        "rt_audio_responses": 3, "rt_live_turns": 4, "rt_idle_sockets": 6,
        "rt_mem_warmup": 150, "rt_mem_sessions": 200, "rt_mem_concurrency": 4,
        "part_timeout_s": 1200,
    },
}
