"""`diffvoice bench engine` needs only the engine's packages: on a bare CUDA image (torch, numpy,
tokenizers; no websockets or soundfile, as on the H200 device) its parser still builds."""

import subprocess
import sys
import textwrap


def test_bench_parser_builds_without_voice_packages():
    code = textwrap.dedent("""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("websockets", "soundfile"):
                    raise ImportError(f"{name} blocked for this test")
                return None

        sys.meta_path.insert(0, Block())
        from diffvoice.engine.cli import build_parser
        argv = ["bench", "engine", "--preset", "tiny-10m", "--batch", "1,4"]
        args = build_parser(argv).parse_args(argv)
        assert args.batch == [1, 4] and args.preset == "tiny-10m"
        assert "websockets" not in sys.modules and "soundfile" not in sys.modules
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")
