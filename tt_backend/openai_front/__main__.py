"""Run the OpenAI front: `python -m tt_backend.openai_front --port 9000 --triton-url 127.0.0.1:8001`."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import uvicorn

from tt_backend.models.checkpoint import resolve_model_dir, served_model_name
from tt_backend.openai_front.access import API_KEY_ENV, CorsPolicy, resolve_api_key
from tt_backend.openai_front.app import FrontConfig, create_app
from tt_backend.openai_front.chat_messages import ImagePolicy, config_takes_images
from tt_backend.openai_front.chat_template import load_chat_template, tokenizer_render
from tt_backend.openai_front.hosts import AllowedHosts
from tt_backend.openai_front.limits import ServerLimits, uvicorn_config
from tt_backend.openai_front.metrics import check_url
from tt_backend.openai_front.output import output_parsing
from tt_backend.openai_front.reasoning import REASONING_PARSERS
from tt_backend.openai_front.tool_parsers import CHOICES as TOOL_PARSERS
from tt_backend.text.image_urls import local_media_root
from tt_backend.text.images import ImageLimits
from tt_backend.text.tokenizer import load_tokenizer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--triton-url", default="127.0.0.1:8001", help="tritonserver's gRPC address")
    parser.add_argument("--model", default="", help="tt_llm's `model` option (empty: the default model)")
    parser.add_argument("--served-model-name", default="", help="the name clients send (default: the "
                        "model folder's name, a GGUF file's stem or the HF id, whole)")
    parser.add_argument("--max-model-len", type=int, default=0, help="tt_llm's max_model_len (0: the "
                        "model's maximum positions)")
    parser.add_argument("--max-body-bytes", type=int, default=FrontConfig.max_body_bytes,
                        help="a larger request body is refused with 413, as soon as it passes this")
    parser.add_argument("--timeout-request-body", type=float, default=FrontConfig.body_timeout_s,
                        help="seconds a request body may take to arrive (408 after)")
    parser.add_argument("--limit-concurrency", type=int, default=ServerLimits.limit_concurrency,
                        help="connections and requests at once; a request over it gets 503")
    parser.add_argument("--timeout-keep-alive", type=int, default=ServerLimits.timeout_keep_alive,
                        help="seconds a connection may idle, before its first request or between requests")
    parser.add_argument("--timeout-request-head", type=float, default=ServerLimits.timeout_request_head_s,
                        help="seconds from a request's first byte to the end of its headers (408 after)")
    parser.add_argument("--allowed-hosts", default="",
                        help="comma-separated Host names or addresses answered beside the loopback ones "
                             "(bound to a loopback address, only those are answered; elsewhere, any Host "
                             "unless this is given)")
    parser.add_argument("--api-key", default=None,
                        help=f"requests (all but /health and /metrics) must send `Authorization: Bearer "
                             f"KEY`, else 401; default: the env {API_KEY_ENV} (which keeps the key out "
                             "of the process list), else no key")
    parser.add_argument("--allowed-origins", default="",
                        help="CORS: origins (scheme://host[:port], or *) whose pages may call the front, "
                             "as a JSON list or comma-separated (default: none, no CORS headers)")
    parser.add_argument("--allowed-methods", default="*", help="CORS: methods allowed (default: *)")
    parser.add_argument("--allowed-headers", default="*", help="CORS: request headers allowed (default: *)")
    parser.add_argument("--allow-credentials", action="store_true",
                        help="CORS: let pages send cookies (not with --allowed-origins '*')")
    parser.add_argument("--triton-metrics-url", default=FrontConfig.triton_metrics_url,
                        help="tritonserver's Prometheus endpoint, re-exported on this port as /metrics")
    parser.add_argument("--strict-fields", action="store_true",
                        help="refuse a request field the front does not know (400 naming it); by default it "
                             "is logged once per name and ignored, as vLLM does")
    parser.add_argument("--chat-template", default=None,
                        help="the chat template: a file, or the template itself (as vLLM's option); "
                             "default: the tokenizer's")
    parser.add_argument("--trust-request-chat-template", action="store_true",
                        help="let requests bring their own chat_template (as vLLM's option; off: a 400)")
    parser.add_argument("--max-n", type=int, default=FrontConfig.max_n,
                        help="the most choices (n) one request may ask for; each is one engine request")
    parser.add_argument("--tool-call-parser", default="auto", choices=TOOL_PARSERS,
                        help="the format tool calls are read in under tool_choice auto (as vLLM's option); "
                             "auto: the chat template's (none found: calls stay content)")
    parser.add_argument("--enable-auto-tool-choice", action="store_true",
                        help="accepted for vLLM's command lines: tool_choice auto is always on here")
    parser.add_argument("--reasoning-parser", default=None, choices=REASONING_PARSERS,
                        help="<think> text goes to reasoning_content (as vLLM's option); default: off")
    parser.add_argument("--limit-mm-per-prompt", default="",
                        help='the most images one request may hold, as vLLM\'s option: {"image": N} '
                             f"(default: {ImageLimits.max_images})")
    parser.add_argument("--max-image-bytes", type=int, default=ImageLimits.max_bytes,
                        help="the largest image file taken (the body's --max-body-bytes bounds it too)")
    parser.add_argument("--max-image-pixels", type=int, default=ImageLimits.max_pixels,
                        help="the most pixels (width x height) an image may have, checked before decoding")
    parser.add_argument("--allowed-local-media-path", default="",
                        help="a folder whose images requests may name as file: URLs (as vLLM's option); "
                             "default: none. No image is ever fetched over the network")
    return parser


def describe(images: ImagePolicy) -> str:
    if not images.takes_images:
        return "refused (a text-only model)"
    limits, root = images.limits, images.local_root
    return (f"up to {limits.max_images} a request, {limits.max_bytes} bytes and {limits.max_pixels} pixels "
            f"each, data: URLs{f' and file: URLs under {root}' if root else ''}")


def image_flags(args: argparse.Namespace) -> tuple[ImageLimits, Path | None]:
    """The image flags: the limits and the local media folder (ValueError naming the bad flag)."""
    count = ImageLimits.max_images
    if args.limit_mm_per_prompt:
        try:
            limit = json.loads(args.limit_mm_per_prompt)
        except json.JSONDecodeError:
            limit = None
        if not isinstance(limit, dict) or set(limit) - {"image"}:
            raise ValueError(f'--limit-mm-per-prompt must be {{"image": N}} (images are the only media '
                             f"taken), got {args.limit_mm_per_prompt!r}")
        count = limit.get("image", count)
        count = count.get("count", count) if isinstance(count, dict) else count  # vLLM's {"count": N}
    for flag, value in (("--limit-mm-per-prompt image", count), ("--max-image-bytes", args.max_image_bytes),
                        ("--max-image-pixels", args.max_image_pixels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value!r}")
    limits = ImageLimits(count, args.max_image_bytes, args.max_image_pixels)
    return limits, local_media_root(args.allowed_local_media_path)


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = ServerLimits(args.limit_concurrency, args.timeout_keep_alive, args.timeout_request_head)
    try:  # before the model loads: a bad flag fails in a moment, with usage
        allowed = AllowedHosts.for_bind(args.host, args.allowed_hosts.split(","))
        api_key = resolve_api_key(args.api_key, os.environ)
        cors = CorsPolicy.from_flags(args.allowed_origins, args.allowed_methods, args.allowed_headers,
                                     args.allow_credentials)
        check_url(args.triton_metrics_url)
        chat_template = None if args.chat_template is None else load_chat_template(args.chat_template)
        image_limits, media_root = image_flags(args)
    except ValueError as exc:
        parser.error(str(exc))
    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    with open(model_dir / "config.json", encoding="utf-8") as f:
        hf_config = json.load(f)
    max_len = args.max_model_len or int(hf_config["max_position_embeddings"])
    name = served_model_name(args.model, args.served_model_name)
    special = {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
    output, parsers = output_parsing(args.tool_call_parser, args.reasoning_parser,
                                     str(chat_template or tokenizer.chat_template or ""), special)
    config = FrontConfig(args.triton_url, name, max_len, max_body_bytes=args.max_body_bytes,
                         body_timeout_s=args.timeout_request_body, allowed_hosts=allowed, api_key=api_key,
                         cors=cors, triton_metrics_url=args.triton_metrics_url,
                         strict_fields=args.strict_fields,
                         trust_request_chat_template=args.trust_request_chat_template, max_n=args.max_n,
                         output=output, images=ImagePolicy(config_takes_images(hf_config), image_limits,
                                                           media_root, name))
    render = tokenizer_render(tokenizer, chat_template, output.tool_instruction)

    def decode(ids: tuple[int, ...]) -> str:
        return str(tokenizer.decode(list(ids)))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text).input_ids)

    logging.getLogger(__name__).info(  # never the key itself
        "OpenAI front for %s (max_model_len %d) on http://%s:%d, Triton at %s; Host check: %s; API key: %s; "
        "CORS: %s; /metrics from %s; %s; images: %s", name, max_len, args.host, args.port, args.triton_url,
        "off" if allowed is None else ", ".join(["loopback names", *sorted(allowed.extra)]),
        "off" if api_key is None else "required", "off" if cors is None else cors.describe(),
        args.triton_metrics_url, parsers, describe(config.images))
    server = uvicorn.Server(uvicorn_config(create_app(config, render, decode, encode), args.host, args.port,
                                           limits))
    server.run()
    if not server.started:  # e.g. the port is taken (uvicorn has logged why)
        raise SystemExit(3)


if __name__ == "__main__":
    main()
