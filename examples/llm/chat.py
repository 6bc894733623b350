"""Chat with the deployed LLM through the official ``openai`` client, streaming the reply.

    aifab run examples/llm/pipeline.yaml       # trains the model and deploys it as "llm"
    aifab keys create --role client            # prints the key's secret once
    export AIFAB_API_KEY=aifab-...             # that secret
    aifab serve &                              # http://127.0.0.1:8000
    python examples/llm/chat.py "What does the cow say?"

Options: --base-url (default http://127.0.0.1:8000/v1, or $AIFAB_BASE_URL), --key (default
$AIFAB_API_KEY), --model (default llm), --max-tokens, --temperature.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Send one chat request and print the reply as it streams in."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("message", nargs="?", default="What does the cow say?")
    parser.add_argument(
        "--base-url", default=os.environ.get("AIFAB_BASE_URL", "http://127.0.0.1:8000/v1")
    )
    parser.add_argument("--key", default=os.environ.get("AIFAB_API_KEY"))
    parser.add_argument("--model", default="llm", help="The deployment name.")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("no API key: pass --key or set AIFAB_API_KEY (aifab keys create)")

    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key=args.key)
    try:
        stream = client.chat.completions.create(
            model=args.model,
            messages=[{"role": "user", "content": args.message}],
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            stream=True,
            stream_options={"include_usage": True},
        )
        print(f"> {args.message}")
        usage = None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                print(chunk.choices[0].delta.content, end="", flush=True)
            usage = chunk.usage or usage
        print()
    except openai.APIConnectionError:
        print(f"cannot reach {args.base_url}: is `aifab serve` running?", file=sys.stderr)
        return 1
    except openai.APIStatusError as exc:
        print(f"error {exc.status_code}: {exc.message}", file=sys.stderr)
        return 1
    if usage is not None:
        print(f"({usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
