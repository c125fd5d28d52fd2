"""The official `openai` client against `diffvoice serve`: chat (streamed) and completions.

    diffvoice serve --api-only --port 8000 &
    python examples/openai_client.py --base-url http://127.0.0.1:8000/v1 "When do you open?"

The diffusion knobs ride in `extra_body` (policy, threshold, steps_per_block, entropy_bound,
block_size); `reasoning_effort` maps onto them. Prints the streamed chat answer (what the
embedded receptionist is for), then a raw /v1/completions continuation to show the route works:
the embedded 3.6M model is trained on chats only, so its raw continuations are fragments, not
sentences (a general open checkpoint, `diffvoice serve --model DIR`, continues text); exits 0.
"""

from __future__ import annotations

import argparse

from openai import OpenAI


def main(question: str, base_url: str, api_key: str) -> tuple[str, str]:
    client = OpenAI(base_url=base_url, api_key=api_key)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=48,
        stream=True, extra_body={"policy": "threshold", "threshold": 0.9})
    chat = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    completion = client.completions.create(model=model, prompt="Bluebird Dental is open",
                                           max_tokens=16, extra_body={"steps_per_block": 4})
    return chat.strip(), completion.choices[0].text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="When are you open on Saturday?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="unused", help="only checked with --api-keys")
    args = parser.parse_args()
    chat, completion = main(args.question, args.base_url, args.api_key)
    print(chat)
    print("(a raw /v1/completions continuation; the embedded model is trained on chats only, "
          "so expect fragments)")
    print("completion:", completion)
