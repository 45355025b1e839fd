"""Structured outputs and a forced tool call through the OpenAI front, with the official `openai` SDK.

    .venv/bin/python client_examples/openai_structured.py
"""

from __future__ import annotations

import argparse
import json

from openai import OpenAI

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                         "country": {"type": "string", "maxLength": 30},
                                         "population_millions": {"type": "integer", "minimum": 0,
                                                                 "maximum": 999}},
        "required": ["city", "country", "population_millions"], "additionalProperties": False}
# Bounds matter for a small model: with an unbounded number, SmolLM2-135M at temperature 0 writes
# digits until max_tokens.
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", default="http://127.0.0.1:9000/v1")
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="unused")
    model = client.models.list().data[0].id
    city = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Describe Paris as JSON."}], max_tokens=80,
        temperature=0, response_format=city)  # type: ignore[arg-type]
    choice = reply.choices[0]
    content = choice.message.content or ""
    cut = f"{content} (cut: {choice.finish_reason})"
    print("response_format:", json.loads(content) if choice.finish_reason == "stop" else cut)
    called = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is the weather in Oslo?"}], max_tokens=80,
        temperature=0, tools=[WEATHER], tool_choice="required")  # type: ignore[list-item]
    for call in called.choices[0].message.tool_calls or []:
        print("tool call:", call.function.name, json.loads(call.function.arguments))  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
