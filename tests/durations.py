"""Refresh tests/durations.json (the order `make test` hands modules to its workers, see
tests/conftest.py) from a JUnit XML of a whole run:

    .venv/bin/python -m pytest -q -p no:randomly --junitxml=/tmp/run.xml
    .venv/bin/python tests/durations.py /tmp/run.xml
"""

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_seconds(junit_xml: str) -> dict[str, float]:
    seconds: collections.Counter = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        for k in range(len(parts), 0, -1):  # tests.voice.test_x[.TestClass] -> its file
            path = Path(*parts[:k]).with_suffix(".py")
            if (ROOT / path).is_file():
                seconds[str(path)] += float(case.get("time") or 0.0)
                break
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])
            if v >= 1.0}


if __name__ == "__main__":
    out = module_seconds(sys.argv[1])
    (ROOT / "tests" / "durations.json").write_text(json.dumps(out, indent=0) + "\n")
    print(f"{len(out)} modules, {sum(out.values()):.0f} s")
