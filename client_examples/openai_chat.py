"""Chat with the served model through the OpenAI front, with the official `openai` SDK (streamed).

    .venv/bin/python client_examples/openai_chat.py "What is the capital of France?"
    .venv/bin/python client_examples/openai_chat.py --completion "The capital of France is"
"""

from __future__ import annotations

import argparse

from openai import OpenAI


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prompt")
    parser.add_argument("--base-url", default="http://127.0.0.1:9000/v1")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--completion", action="store_true", help="a plain completion, no chat template")
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused")
    model = client.models.list().data[0].id
    if args.completion:
        for part in client.completions.create(model=model, prompt=args.prompt, max_tokens=args.max_tokens,
                                              temperature=args.temperature, stream=True):
            print(part.choices[0].text, end="", flush=True)
        print()
        return
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": args.prompt}],
                                            max_tokens=args.max_tokens, temperature=args.temperature,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
        elif chunk.usage is not None:
            usage = chunk.usage
            print(f"\n[{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens]")


if __name__ == "__main__":
    main()
