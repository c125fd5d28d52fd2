"""`diffvoice tools`: the served receptionist tools as JSON; a model without a fact sheet is a
clear error (exit 2), not a traceback."""

from __future__ import annotations

import json

import pytest

from diffvoice.engine import DEFAULT_MODEL_DIR
from diffvoice.engine.cli import main


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "facts.yaml").is_file(),
                    reason="models/receptionist-tiny not present")
def test_prints_the_served_tools(capsys):
    from diffvoice.agent.tools import served_tool_schemas

    assert main(["tools", "--model", str(DEFAULT_MODEL_DIR)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == served_tool_schemas(DEFAULT_MODEL_DIR)
    names = [t["function"]["name"] for t in printed]
    assert names == ["check_availability", "book_appointment", "cancel_appointment"]
    day = printed[1]["function"]["parameters"]["properties"]["day"]
    assert "sunday" not in day["enum"] and day["x-diffvoice-context"] == "mentioned"


def test_a_model_without_a_fact_sheet_is_a_clear_error(tmp_path, capsys):
    assert main(["tools", "--model", str(tmp_path)]) == 2
    assert "facts.yaml" in capsys.readouterr().err


def test_the_served_schemas_are_still_where_they_were_documented():
    from diffvoice.agent import tools
    from diffvoice.voice.receptionist import tools as former

    assert former.served_tool_schemas is tools.served_tool_schemas
    assert former.ReceptionistTools is tools.ReceptionistTools
