"""A zero-latency OpenAI-compatible model server for benchmarks, in its own process.

    python bench/zero_model.py [--chunks 10] [--port 0]

Prints ``http://127.0.0.1:PORT/v1`` on stdout once it listens.  Every
``POST .../chat/completions`` gets the same streamed reply at once: ``--chunks``
content deltas of "word ", a finish reason, usage, ``[DONE]``, over keep-alive
HTTP/1.1 (chunked).  The request body is read and ignored; nothing is parsed
beyond the headers.  It exists so that a benchmark measures the agent, not its
model: the tests' scripted model (a thread per request, ``http.server``) costs
more CPU per call than the agent's whole turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json


def reply(chunks: int) -> bytes:
    """The whole chunked HTTP body of one streamed completion."""

    def event(delta: dict[str, object], finish: str | None = None, **extra: object) -> bytes:
        chunk = {
            "id": "bench",
            "object": "chat.completion.chunk",
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    events = [event({"role": "assistant", "content": "word "}) for _ in range(chunks)]
    events.append(event({}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
    events.append(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    return head + body


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: bytes) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(answer)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    answer = reply(args.chunks)
    server = await asyncio.start_server(
        lambda r, w: serve(r, w, answer), "127.0.0.1", args.port, backlog=1024
    )
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
