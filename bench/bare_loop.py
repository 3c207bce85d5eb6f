"""The baseline of bench/throughput.py: a bare openai SDK loop, run as a whole process.

    python bench/bare_loop.py REQUESTS.jsonl OUT.jsonl URL [--concurrency 64] [--http httpx]

REQUESTS.jsonl holds one chat-completions body per line (the ones tagger sends, rendered by
the benchmark beforehand). The loop sends them all, CONCURRENCY at a time, and writes each
answer's content as one JSON line in input order: what a user's own script would do, with no
validation, cache, retries or progress. It imports nothing from tagger.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import openai


async def send_all(
    bodies: list[dict[str, Any]], url: str, concurrency: int, http: str
) -> list[str]:
    """The answer content of every body, in input order."""
    http_client = openai.DefaultAioHttpClient() if http == "aiohttp" else None
    client = openai.AsyncOpenAI(
        base_url=url, api_key="sk-bench", max_retries=0, http_client=http_client
    )
    slots = asyncio.Semaphore(concurrency)

    async def one(body: dict[str, Any]) -> str:
        async with slots:
            completion = await client.chat.completions.create(**body)
            return completion.choices[0].message.content or ""

    try:
        return await asyncio.gather(*(one(body) for body in bodies))
    finally:
        await client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("requests")
    parser.add_argument("output")
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=["httpx", "aiohttp"], default="httpx")
    args = parser.parse_args()
    with open(args.requests, encoding="utf-8") as source:
        bodies = [json.loads(line) for line in source]
    answers = asyncio.run(send_all(bodies, args.url, args.concurrency, args.http))
    with open(args.output, "w", encoding="utf-8") as out:
        for answer in answers:
            out.write(json.dumps({"answer": answer}, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
