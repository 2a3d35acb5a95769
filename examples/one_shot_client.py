"""Send one prompt to an ACP v2 agent and print what it says.

    python examples/one_shot_client.py --command "python examples/echo_agent.py" "Hello"

Starts the agent, initializes, opens a session in the current directory, sends
the prompt, prints the projected agent text once the session is idle again,
then closes the session.  Permission requests are answered ``cancelled``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from crow.acp import AcpError, ClientSide, StdioTransport, schema, spawn

TURN_TIMEOUT_S = 300


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", required=True, help="the agent command line")
    parser.add_argument("prompt", help="the prompt text")
    args = parser.parse_args()

    transport = await spawn(args.command)
    try:
        return await one_shot(transport, args.prompt)
    except ConnectionError:
        await transport.aclose()
        status = transport.process.returncode if transport.process else None
        raise ConnectionError(f"the agent closed the connection (exit status {status})") from None


async def one_shot(transport: StdioTransport, prompt: str) -> int:
    info = schema.Implementation(name="crow-one-shot-client", version="0.1")
    async with ClientSide(transport, info=info) as client:
        init = await client.initialize()
        if init.capabilities in (schema.UNSET, None) or init.capabilities.session in (
            schema.UNSET,
            None,
        ):
            print("The agent does not offer sessions.", file=sys.stderr)
            return 1
        session = await client.new_session(os.getcwd())
        turn = await session.prompt(prompt)
        print("Prompt accepted; waiting for session output and completion...")
        async with asyncio.timeout(TURN_TIMEOUT_S):
            await session.wait(turn)
        print(session.projection.text())
        print(f"Session is idle: {turn.stop_reason}")
        await session.close()
    return 0


def run() -> int:
    try:
        return asyncio.run(main())
    except AcpError as exc:
        print(f"error: {exc.message} (code {exc.code})", file=sys.stderr)
        return 1
    except (ConnectionError, TimeoutError) as exc:
        print(f"error: {exc or 'timed out'}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
