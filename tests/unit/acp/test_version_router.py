"""The v1|v2 router and the acp message adapter, in memory (ACP-V2.md §3.3, §3.4, §2.3).

(Not ``test_router.py``: tests/unit/models has one, and the test folders are
not packages.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from crow.acp import AgentSide, ClientSide, MessageTransport, ProtocolRouter, schema
from crow.acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    MessageTooLarge,
)
from crow.acp.jsonrpc import Transport
from crow.acp.router import ReplayTransport
from crow.acp.transports.memory import MemoryTransport, memory_pair

AGENT_INFO = schema.Implementation(name="router-test-agent", version="1")
CLIENT_INFO = schema.Implementation(name="router-test-client", version="1")
WAIT_S = 5


def frame(message: Any) -> bytes:
    return json.dumps(message).encode()


def initialize(version: Any, rid: Any = 1) -> bytes:
    return frame(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "initialize",
            "params": {"protocolVersion": version},
        }
    )


class Recorder:
    """A protocol handler that records the frames it reads until EOF."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.frames: list[bytes] = []
        self.started = asyncio.Event()

    async def __call__(self, transport: Transport) -> None:
        self.started.set()
        while (got := await transport.read_frame()) is not None:
            self.frames.append(got)
            await transport.write_frames([frame({"handledBy": self.name})])


class Wire:
    """The client end of a connection the router serves."""

    def __init__(self, router: ProtocolRouter) -> None:
        self.client, agent_end = memory_pair()
        self.task = asyncio.create_task(router.serve(agent_end))

    async def send(self, *frames: bytes) -> None:
        await self.client.write_frames(list(frames))

    async def recv(self) -> Any:
        got = await self.client.read_frame()
        assert got is not None, "the connection closed"
        return json.loads(got)

    async def close(self) -> None:
        await self.client.aclose()
        await self.task


@pytest.fixture
async def both() -> AsyncIterator[tuple[Recorder, Recorder]]:
    async with asyncio.timeout(WAIT_S):
        yield Recorder("v1"), Recorder("v2")


async def test_version_1_goes_to_v1_with_the_initialize_frame_first(both):
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    first = initialize(1)
    await wire.send(first, frame({"jsonrpc": "2.0", "id": 2, "method": "session/new"}))
    assert await wire.recv() == {"handledBy": "v1"}
    assert await wire.recv() == {"handledBy": "v1"}
    await wire.close()
    assert v1.frames[0] == first and len(v1.frames) == 2
    assert not v2.started.is_set()


@pytest.mark.parametrize("version", [2, 3, 65535])
async def test_version_2_or_newer_goes_to_v2(both, version):
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    await wire.send(initialize(version))
    assert await wire.recv() == {"handledBy": "v2"}
    await wire.close()
    assert not v1.started.is_set()


async def test_requests_before_initialize_are_refused_and_notifications_dropped(both):
    """§3.4: -32600 for requests, silence for notifications and stray responses."""
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    await wire.send(
        frame({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}),
        frame({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}),
        frame({"jsonrpc": "2.0", "id": 99, "result": {}}),
        frame({"jsonrpc": "2.0", "id": "a", "method": "session/new", "params": {}}),
    )
    refused = await wire.recv()
    assert refused["id"] == "a" and refused["error"]["code"] == INVALID_REQUEST
    await wire.send(initialize(2))
    assert await wire.recv() == {"handledBy": "v2"}
    await wire.close()
    assert len(v2.frames) == 1


BAD_INPUT = [  # (frame, expected code, reply id)
    (b'{"jsonrpc":"2.0","id":1,"method":', PARSE_ERROR, None),
    (b"[]", INVALID_REQUEST, None),
    (b'[{"jsonrpc":"2.0","id":1,"method":"initialize"}]', INVALID_REQUEST, None),
    (b"42", INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":7,"method":"initialize","params":[]}', INVALID_PARAMS, 7),
    (b'{"jsonrpc":"2.0","id":8,"method":"initialize","params":"x"}', INVALID_REQUEST, 8),
    (b"[" * 5000 + b"]" * 5000, PARSE_ERROR, None),
    (b'{"jsonrpc":"2.0","id":"\\ud800","method":"session/new"}', INVALID_REQUEST, "\ud800"),
    (b'{"jsonrpc":"2.0","id":9,"method":"\\udfff"}', INVALID_REQUEST, 9),
]


@pytest.mark.parametrize(("line", "code", "rid"), BAD_INPUT)
async def test_bad_input_before_initialize_gets_its_code(both, line, code, rid):
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    await wire.send(line)
    reply = await wire.recv()
    assert reply["id"] == rid and reply["error"]["code"] == code
    await wire.send(initialize(1))
    assert await wire.recv() == {"handledBy": "v1"}
    await wire.close()


@pytest.mark.parametrize(
    ("version", "code"),
    [
        (0, UNSUPPORTED_PROTOCOL_VERSION),
        (-1, UNSUPPORTED_PROTOCOL_VERSION),
        ("2", INVALID_PARAMS),
        (2.0, INVALID_PARAMS),
        (True, INVALID_PARAMS),
        (None, INVALID_PARAMS),
    ],
)
async def test_an_unusable_version_is_refused_and_the_connection_stays_open(both, version, code):
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    await wire.send(initialize(version, rid=5))
    refused = await wire.recv()
    assert refused["id"] == 5 and refused["error"]["code"] == code
    if code == UNSUPPORTED_PROTOCOL_VERSION:
        assert refused["error"]["data"] == {"requested": version, "supported": [1, 2]}
    await wire.send(initialize(2, rid=6))
    assert await wire.recv() == {"handledBy": "v2"}
    await wire.close()


async def test_with_v2_off_a_v2_initialize_gets_32022_and_v1_still_works(both):
    v1, _ = both
    wire = Wire(ProtocolRouter(v1=v1, v2=None))
    await wire.send(initialize(2, rid="x"))
    refused = await wire.recv()
    assert refused["id"] == "x"
    assert refused["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert refused["error"]["data"] == {"requested": 2, "supported": [1]}
    await wire.send(initialize(1, rid="y"))
    assert await wire.recv() == {"handledBy": "v1"}
    await wire.close()
    assert json.loads(v1.frames[0])["id"] == "y"


async def test_without_v1_a_v1_initialize_gets_32022(both):
    _, v2 = both
    wire = Wire(ProtocolRouter(v2=v2))
    await wire.send(initialize(1))
    refused = await wire.recv()
    assert refused["error"]["data"] == {"requested": 1, "supported": [2]}
    await wire.close()


async def test_a_connection_that_ends_before_initialize_reaches_no_handler(both):
    v1, v2 = both
    wire = Wire(ProtocolRouter(v1=v1, v2=v2))
    await wire.send(frame({"jsonrpc": "2.0", "method": "session/cancel"}))
    await wire.close()
    assert not v1.started.is_set() and not v2.started.is_set()


def test_a_router_needs_a_handler():
    with pytest.raises(ValueError):
        ProtocolRouter(v2=None, v1=None)


class Oversized:
    """A transport whose first frame was past the size limit."""

    def __init__(self, then: list[bytes]) -> None:
        self.frames: list[bytes | Exception] = [self._too_large(), *then]
        self.written: list[bytes] = []

    @staticmethod
    def _too_large() -> Exception:
        exc = MessageTooLarge()
        exc.prefix = b'{"jsonrpc":"2.0","id":41,"method":"initialize","params":{"x":"'  # type: ignore[attr-defined]
        return exc

    async def read_frame(self) -> bytes | None:
        if not self.frames:
            return None
        item = self.frames.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async def write_frames(self, frames: list[bytes]) -> None:
        self.written.extend(frames)

    async def aclose(self) -> None:
        pass


async def test_an_oversized_initialize_is_refused_with_its_id(both):
    v1, v2 = both
    transport = Oversized([initialize(2)])
    await ProtocolRouter(v1=v1, v2=v2).serve(transport)
    refused = json.loads(transport.written[0])
    assert refused["id"] == 41 and refused["error"]["code"] == INVALID_REQUEST
    assert json.loads(transport.written[1]) == {"handledBy": "v2"}


async def test_crow_acp_v2_runs_unchanged_behind_the_router():
    """The v2 AgentSide answers the replayed initialize itself; a v2 client sees v2."""

    async def v2(transport: Transport) -> None:
        side = AgentSide(transport, info=AGENT_INFO)
        side.handle("session/new", new_session)
        await side.serve()

    async def new_session(params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    client_end, agent_end = memory_pair()
    served = asyncio.create_task(ProtocolRouter(v1=None, v2=v2).serve(agent_end))
    async with asyncio.timeout(WAIT_S):
        async with ClientSide(client_end, info=CLIENT_INFO) as client:
            response = await client.initialize()
            assert response.protocol_version == 2 and response.info.name == AGENT_INFO.name
            assert (await client.new_session("/tmp")).id == "s1"
        await served


async def test_replay_transport_gives_the_frames_first():
    inner, other = memory_pair()
    await other.write_frames([b"later"])
    replay = ReplayTransport(inner, [b"first", b"second"])
    assert [await replay.read_frame() for _ in range(3)] == [b"first", b"second", b"later"]


# ---- MessageTransport ------------------------------------------------------------
async def pair() -> tuple[MessageTransport, MemoryTransport]:
    ours, theirs = memory_pair()
    return MessageTransport(ours), theirs


async def test_the_adapter_answers_what_acp_would_mishandle():
    """ECOSYSTEM.md trap 1: -32700, batches, $/cancel_request, string-echoed ids."""
    async with asyncio.timeout(WAIT_S):
        messages, peer = await pair()
        await peer.write_frames(
            [
                b"{not json",
                b'[{"jsonrpc":"2.0","id":1,"method":"session/new"}]',
                b'"just a string"',
                b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}',
                b'{"jsonrpc":"2.0","id":"3","result":{}}',
            ]
        )
        assert await messages.receive() == {"jsonrpc": "2.0", "id": 3, "result": {}}
        codes = [json.loads(await peer.read_frame() or b"")["error"]["code"] for _ in range(3)]
        assert codes == [PARSE_ERROR, INVALID_REQUEST, INVALID_REQUEST]
        await peer.aclose()
        assert await messages.receive() is None
        await messages.close()


async def test_the_adapter_sends_in_order_and_flushes_on_close():
    async with asyncio.timeout(WAIT_S):
        messages, peer = await pair()
        for n in range(50):
            messages.send_nowait({"jsonrpc": "2.0", "method": "n", "params": {"n": n}})
        await messages.send({"jsonrpc": "2.0", "id": 0, "result": {}})
        await messages.close()
        seen = []
        while (got := await peer.read_frame()) is not None:
            seen.append(json.loads(got))
        assert [m["params"]["n"] for m in seen[:-1]] == list(range(50))
        assert seen[-1]["id"] == 0
        messages.send_nowait({"jsonrpc": "2.0", "method": "late"})  # dropped, no error
        with pytest.raises(ConnectionError):
            await messages.send({"jsonrpc": "2.0", "id": 1, "method": "session/request_permission"})


async def test_the_adapter_answers_a_v1_notification_sent_as_a_request():
    async with asyncio.timeout(WAIT_S):
        messages, peer = await pair()
        await peer.write_frames(
            [
                frame(
                    {
                        "jsonrpc": "2.0",
                        "id": 4,
                        "method": "session/cancel",
                        "params": {"sessionId": "s"},
                    }
                )
            ]
        )
        assert await messages.receive() == {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": "s"},
        }
        assert json.loads(await peer.read_frame() or b"") == {
            "jsonrpc": "2.0",
            "id": 4,
            "result": {},
        }
        await messages.settled(0)  # nothing owed: returns at once
        await messages.close()


async def test_the_adapter_answers_what_is_still_owed_when_it_closes():
    """End of input: settled() waits (bounded) for replies; close() answers the rest."""
    async with asyncio.timeout(WAIT_S):
        messages, peer = await pair()
        await peer.write_frames([frame({"jsonrpc": "2.0", "id": i, "method": "m"}) for i in (1, 2)])
        assert (await messages.receive() or {})["id"] == 1
        assert (await messages.receive() or {})["id"] == 2
        answered = asyncio.create_task(messages.settled(WAIT_S))
        await messages.send({"jsonrpc": "2.0", "id": 1, "result": {}})
        await asyncio.sleep(0.01)
        assert not answered.done()  # 2 is still owed
        await messages.settled(0.01)  # bounded: returns anyway
        await messages.close()
        answered.cancel()
        seen = [json.loads(f) for f in [await peer.read_frame(), await peer.read_frame()] if f]
        assert seen[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert seen[1]["id"] == 2 and seen[1]["error"]["code"] == -32800


async def test_the_adapter_writes_what_orjson_refuses():
    async with asyncio.timeout(WAIT_S):
        messages, peer = await pair()
        await peer.write_frames([b"[" * 3000 + b"]" * 3000])
        await messages.send({"jsonrpc": "2.0", "id": "\ud800", "result": {}})
        await messages.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "error": {"code": -32602, "message": "x", "data": [ValueError("e")]},
            }
        )
        receiving = asyncio.create_task(messages.receive())
        replies = [json.loads(await peer.read_frame() or b"") for _ in range(3)]
        assert replies[0] == {"jsonrpc": "2.0", "id": "\ud800", "result": {}}
        assert replies[1]["error"]["data"] == ["e"]
        assert replies[2]["id"] is None and replies[2]["error"]["code"] == PARSE_ERROR
        await peer.aclose()
        assert await receiving is None
        await messages.close()


async def test_a_refused_initialize_leaves_the_gate_open_for_the_next():
    """The gate's initialize hold ends with the refusal (else the retry would be held)."""
    wire = Wire(ProtocolRouter(v2=Recorder("v2")))
    async with asyncio.timeout(WAIT_S):
        await wire.send(initialize(0, rid=1), frame({"jsonrpc": "2.0", "id": 2, "method": "x"}))
        assert (await wire.recv())["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert (await wire.recv())["error"]["code"] == INVALID_REQUEST
        await wire.send(initialize(2, rid=3))
        assert await wire.recv() == {"handledBy": "v2"}
        await wire.close()
