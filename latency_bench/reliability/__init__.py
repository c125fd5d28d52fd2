"""Reliability harness: fuzz, isolation, soak, barge-in storm, admission and memory checks that
drive a real `diffvoice serve` process over loopback with the project's own load clients.

`diffvoice bench reliability --short|--full --out docs/reliability.md` (latency_bench.reliability
.cli) runs the parts; each part is a module with `async def run(ctx, scale) -> dict` whose result
holds its figures and a list of `checks` ({"name", "ok", "detail"}). Every loop is bounded in
count and in time.
"""
