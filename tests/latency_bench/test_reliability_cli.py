"""`diffvoice bench reliability --soak-callers/--soak-s`: a machine's sustained caller count is
found by running the soak part at other sizes; bad sizes are refused before anything starts."""

import argparse

from diffvoice.latency_bench.reliability import cli


def _args(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_bad_soak_sizes_are_refused_before_anything_runs(capsys):
    for argv in (["--soak-callers", "3"], ["--soak-callers", "0"], ["--soak-s", "-1"]):
        assert cli.run(_args("--full", "--parts", "soak", *argv)) == 2
        assert "must be" in capsys.readouterr().err


def test_soak_sizes_parse_and_default_to_the_scale():
    args = _args("--full", "--soak-callers", "16", "--soak-s", "180")
    assert (args.soak_callers, args.soak_s) == (16, 180.0)
    default = _args("--full")
    assert default.soak_callers is None and default.soak_s is None
