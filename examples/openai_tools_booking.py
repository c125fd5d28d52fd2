"""A booking through the OpenAI API with the receptionist's served tools (docs/tool-calling.md).

    diffvoice serve --api-only --port 8000 &
    python examples/openai_tools_booking.py --base-url http://127.0.0.1:8000/v1

Takes the tools from `diffvoice tools` (the schemas the server decodes them with), asks for a
cleaning on Friday at 10, answers the receptionist's question for the name, and prints the
reply, then the tool call the model made (name and JSON arguments). Running the call against a
calendar and sending its result back as a `tool` message is the client's part.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from openai import OpenAI


def served_tools() -> list[dict]:
    out = subprocess.check_output([sys.executable, "-m", "diffvoice.engine.cli", "tools"])
    return json.loads(out)


def main(base_url: str, api_key: str) -> tuple[str, str, dict]:
    tools = served_tools()
    client = OpenAI(base_url=base_url, api_key=api_key)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "I need a cleaning on Friday. 10am."}]
    reply = client.chat.completions.create(model=model, messages=messages, tools=tools)
    question = reply.choices[0].message.content or ""
    messages += [{"role": "assistant", "content": question},
                 {"role": "user", "content": "My name is Sam Jones."}]
    reply = client.chat.completions.create(model=model, messages=messages, tools=tools)
    calls = reply.choices[0].message.tool_calls or []
    if not calls:
        return question, "", {"no call": reply.choices[0].message.content}
    call = calls[0]
    return question, call.function.name, json.loads(call.function.arguments)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="unused", help="only checked with --api-keys")
    args = parser.parse_args()
    question, name, arguments = main(args.base_url, args.api_key)
    print(question)
    print(name, json.dumps(arguments))
