"""Soak: 50 clients on ONE session of ``crow serve --http`` for a minute, then nothing.

    CROW_SOAK=1 python3 -m pytest -q -s tests/soak
    CROW_SOAK=1 CROW_SOAK_SECONDS=10 CROW_SOAK_CLIENTS=20 python3 -m pytest -q -s tests/soak

Half the clients speak WebSocket, half streamable HTTP + SSE (``connect_url``'s
raw frames: no validation in the way).  Each one attaches with
``session/resume`` and prompts whenever it sees the session idle; a busy
session refuses with -32602 "busy", which is fine.  Some clients send
``session/cancel`` in the same write as their prompt; some drop their
connection abruptly (no close handshake, no DELETE) and come back with
``replayFrom: {"type": "_crow/after", "seq": <last seen>}``.  The model is the
scripted server, answering at once.

Invariants, each failure named in the assertion message:

- every request that was not cut off by the client's own drop gets exactly one
  answer;
- every acknowledged prompt (a ``session/prompt`` result with a messageId)
  ends in a ``state_update`` idle that the client that sent it sees: live,
  after its ``user_message`` by ``crow/seq``, or as the state snapshot that
  follows a resume's replay (a replay carries no state changes);
- a client's updates come in ``crow/seq`` order, nothing twice, and no gap
  while it is attached (a replay skips the state changes, by design);
- once everyone has left, the server comes back near its post-warm-up
  baseline within ``CROW_SOAK_SETTLE_S`` seconds (it gives memory back once its
  last session unloads, crow.runtime.quiet): RSS within max(30 MiB, 30 %),
  open fds within a few, and no more child processes (tool servers) than then.

Knobs: ``CROW_SOAK_SECONDS`` (60), ``CROW_SOAK_CLIENTS`` (50),
``CROW_SOAK_SETTLE_S`` (30), ``CROW_SOAK_SEED`` (random), and
``CROW_SOAK_DUMP=N``: the server runs with ``CROW_DEBUG_MEMORY=N`` (N frames
of allocation tracing; 0: none, much faster) and the test prints its memory
dumps (post-warm-up and after the soak: live objects by type, the top
allocation sites) and its RSS after ``gc.collect`` + ``malloc_trim``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from crow_testing.fakemodel import Text
from crow_testing.serve_support import write_config

from crow.acp.transports.http_client import connect_url
from crow.runtime.quiet import QUIET_S

SECONDS = float(os.environ.get("CROW_SOAK_SECONDS", "60"))
CLIENTS = int(os.environ.get("CROW_SOAK_CLIENTS", "50"))
SETTLE_S = float(os.environ.get("CROW_SOAK_SETTLE_S", "30"))
SEED = int(os.environ.get("CROW_SOAK_SEED", str(random.randrange(1 << 30))))
DUMP = os.environ.get("CROW_SOAK_DUMP", "")

#: How long one request may wait for its answer on a loaded 2-core machine.
ANSWER_S = 30.0
#: How long a client waits for the idle of its acknowledged prompt before moving on
#: (it is checked again at the end, after the final resume).
TURN_S = 30.0
#: "Near the baseline": RSS within max(RSS_SLACK_MIB, RSS_SLACK_RATIO x baseline).
RSS_SLACK_MIB = 30.0
RSS_SLACK_RATIO = 0.30
#: The server's idle_timeout_s: the connections of dropped clients expire after it.
IDLE_TIMEOUT_S = 10
#: Open descriptors allowed above the baseline (the WAL's files come and go).
FD_SLACK = 4
#: Problems listed per kind in the failure message (the counts are always given).
SHOWN = 5


# ---- the server ------------------------------------------------------------------
class Server:
    """``crow serve --http 127.0.0.1:0``; stderr goes to a file (dumps are long)."""

    def __init__(self, log: Path, env: dict[str, str]) -> None:
        self.log = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
                env={**os.environ, **env},
            )
        self.pid = self.process.pid
        self.url = self._wait_for_url()

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"serving ACP at (http://\S+)", self.text())
            if found:
                return found.group(1)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"crow serve --http did not start:\n{self.text()[-3000:]}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class Resources:
    rss_mib: float
    fds: int
    threads: int
    children: list[int]
    anon_mib: float = 0.0  # of the RSS: the heap; the rest is mapped files

    def __str__(self) -> str:
        return (
            f"RSS {self.rss_mib:.1f} MiB ({self.anon_mib:.1f} anonymous), {self.fds} fds, "
            f"{self.threads} threads, {len(self.children)} child processes"
        )


def resources(pid: int) -> Resources:
    proc = Path(f"/proc/{pid}")
    rss = next(
        int(line.split()[1])
        for line in (proc / "status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    tasks = list((proc / "task").iterdir())
    children = []
    for task in tasks:
        with contextlib.suppress(FileNotFoundError):  # a thread that has just ended
            children += [int(pid) for pid in (task / "children").read_text().split()]
    anon = next(
        int(line.split()[1])
        for line in (proc / "smaps_rollup").read_text().splitlines()
        if line.startswith("Anonymous:")
    )
    fds = len(list((proc / "fd").iterdir()))
    return Resources(rss / 1024, fds, len(tasks), children, anon / 1024)


async def settled(pid: int, max_s: float = 20.0) -> Resources:
    """The server's resources once its fds and children have stopped changing."""
    previous = resources(pid)
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = resources(pid)
        if (now.fds, len(now.children)) == (previous.fds, len(previous.children)):
            return now
        previous = now
    return previous


def leaks(base: Resources, now: Resources) -> list[str]:
    """What is still above the baseline (empty: back near it)."""
    found = []
    allowed = base.rss_mib + max(RSS_SLACK_MIB, RSS_SLACK_RATIO * base.rss_mib)
    if now.rss_mib > allowed:
        found.append(
            f"RSS {now.rss_mib:.1f} MiB after everyone left, baseline {base.rss_mib:.1f} MiB "
            f"(allowed up to {allowed:.1f}; CROW_SOAK_DUMP=0 shows what is still alive)"
        )
    if now.fds > base.fds + FD_SLACK:
        found.append(f"{now.fds} open fds after everyone left, baseline {base.fds}")
    if len(now.children) > len(base.children):
        found.append(
            f"{len(now.children)} child processes after everyone left "
            f"(pids {now.children}), baseline {len(base.children)}"
        )
    return found


async def back_to_baseline(pid: int, base: Resources, within_s: float) -> tuple[Resources, float]:
    """Poll until nothing is above the baseline, or ``within_s`` has passed."""
    started = time.monotonic()
    now = resources(pid)
    while leaks(base, now) and time.monotonic() - started < within_s:
        await asyncio.sleep(1.0)
        now = resources(pid)
    return now, time.monotonic() - started


# ---- one client's record, across its reconnects -------------------------------------
@dataclass
class Ledger:
    """What one client saw, across its reconnects.

    A replay carries the content of what was missed but no state changes (the
    spec's resume: replayed history, then ONE current ``state_update``, without
    ``crow/seq``).  So a turn has ended for this client when it saw an idle
    logged after the turn's ``user_message``, or an idle snapshot after a
    resume that had replayed up to (or past) that ``user_message``.
    """

    name: str
    last_seq: int = 0
    live: bool = False  # past a resume's snapshot and first update: no gap allowed
    snapshot_seen: bool = False
    user_seq: dict[str, int] = field(default_factory=dict)  # messageId -> its user_message
    idle_marks: list[float] = field(default_factory=list)  # ends turns that began before
    acked: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def problem(self, kind: str, detail: str) -> None:
        self.problems.setdefault(kind, []).append(f"{self.name}: {detail}")

    def attaching(self) -> None:
        """A resume is on its way: a replay (with gaps: no state changes) comes first."""
        self.live = self.snapshot_seen = False

    def take(self, params: dict[str, Any]) -> str | None:
        """Record one session/update; returns the state it announces, if any."""
        update = params.get("update") or {}
        kind = update.get("sessionUpdate")
        seq = (params.get("_meta") or {}).get("crow/seq")
        if isinstance(seq, int):
            self._check_order(seq)
            if kind == "user_message":
                self.user_seq[update.get("messageId", "?")] = seq
            elif kind == "state_update" and update.get("state") == "idle":
                self.idle_marks.append(seq)
        elif kind == "state_update":  # the snapshot after a resume
            self.snapshot_seen = True
            if update.get("state") == "idle":
                self.idle_marks.append(self.last_seq + 0.5)
        self.progress.set()
        return str(update.get("state")) if kind == "state_update" else None

    def _check_order(self, seq: int) -> None:
        if seq <= self.last_seq:
            self.problem("duplicate update", f"crow/seq {seq} again (last seen {self.last_seq})")
            return
        if self.live and seq != self.last_seq + 1:
            self.problem("missed updates", f"crow/seq jumped from {self.last_seq} to {seq}")
        self.last_seq = seq
        self.live = self.live or self.snapshot_seen

    def ended(self, message_id: str) -> bool:
        start = self.user_seq.get(message_id)
        return start is not None and any(mark > start for mark in self.idle_marks)

    async def wait_ended(self, message_id: str, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not self.ended(message_id):
                    self.progress.clear()
                    await self.progress.wait()
        return self.ended(message_id)

    def unended(self) -> list[str]:
        return [m for m in self.acked if not self.ended(m)]


# ---- one connection ---------------------------------------------------------------
class Dropped(Exception):
    """The connection ended (by us, abruptly, or by the server)."""


class Connection:
    """Raw JSON-RPC frames over ``connect_url``'s transport, answers matched by id."""

    def __init__(self, transport: Any, ledger: Ledger) -> None:
        self.transport = transport
        self.ledger = ledger
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.answers: dict[int, int] = {}
        self.state: str | None = None
        self.changed = asyncio.Event()
        self.gone = False
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, ledger: Ledger) -> Connection:
        connection = cls(await connect_url(url), ledger)
        reply = await connection.request(
            "initialize", {"protocolVersion": 2, "info": {"name": ledger.name, "version": "0"}}
        )
        if "result" not in reply:
            raise AssertionError(f"{ledger.name}: initialize refused: {reply}")
        return connection

    async def _read(self) -> None:
        try:
            while (frame := await self.transport.read_frame()) is not None:
                message = orjson.loads(frame)
                for one in message if isinstance(message, list) else [message]:
                    self._take(one)
        except (ConnectionError, OSError):
            pass
        finally:
            self.gone = True
            for future in self.waiting.values():
                if not future.done():
                    future.set_exception(Dropped())
            self.changed.set()

    def _take(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if message["method"] == "session/update":
                state = self.ledger.take(message.get("params") or {})
                if state is not None:
                    self.state = state
                    self.changed.set()
            return  # the agent asks nothing of a text-only model's clients
        rid = message.get("id")
        if not isinstance(rid, int):
            self.ledger.problem("stray answer", f"an answer with id {rid!r}: {message}")
            return
        self.answers[rid] = self.answers.get(rid, 0) + 1
        if self.answers[rid] > 1:
            self.ledger.problem("answered twice", f"request {rid} got a second answer: {message}")
        future = self.waiting.pop(rid, None)
        if future is not None and not future.done():
            future.set_result(message)

    async def send(
        self, method: str, params: dict[str, Any], *, also: list[bytes] | None = None
    ) -> asyncio.Future[dict[str, Any]]:
        """Write a request (and ``also``, in the same write); the future of its answer."""
        if self.gone:
            raise Dropped()
        rid = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = future
        frame = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            await self.transport.write_frames([frame, *(also or [])])
        except (ConnectionError, OSError) as exc:
            raise Dropped() from exc
        return future

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        future = await self.send(method, params)
        return await self.answer(future, method)

    async def answer(self, future: asyncio.Future[dict[str, Any]], what: str) -> dict[str, Any]:
        try:
            async with asyncio.timeout(ANSWER_S):
                return await future
        except TimeoutError:
            self.ledger.problem("unanswered", f"no answer to {what} within {ANSWER_S:.0f} s")
            raise Dropped() from None

    async def wait_idle(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.state != "idle" and not self.gone:
                    self.changed.clear()
                    await self.changed.wait()

    async def drop(self) -> None:
        """Vanish: no close handshake, no DELETE; requests in flight are forgotten."""
        self.waiting.clear()
        socket = getattr(self.transport, "socket", None)
        if socket is not None:  # WebSocket: abort the TCP connection under it
            socket.transport.abort()
        else:  # HTTP: stop reading the SSE streams and close the sockets
            for task in self.transport.streams.values():
                task.cancel()
            self.transport.closed = True
            await self.transport.client.aclose()
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)

    async def leave(self) -> None:
        """Close properly: every request sent must have been answered by now."""
        for rid, future in self.waiting.items():
            if not future.done():
                self.ledger.problem("unanswered", f"request {rid} still unanswered at close")
        with contextlib.suppress(Exception):
            await self.transport.aclose()
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)


# ---- one client -------------------------------------------------------------------
class Client:
    def __init__(self, index: int, url: str, session_id: str, cwd: str, rng: random.Random):
        self.websocket = index % 2 == 0
        self.url = url.replace("http://", "ws://", 1) if self.websocket else url
        self.ledger = Ledger(f"client {index} ({'ws' if self.websocket else 'http'})")
        self.session_id, self.cwd, self.rng = session_id, cwd, rng
        self.cancels = index % 5 == 1  # cancel in the same write as the prompt, half the time
        self.drops = index % 3 == 2  # drop abruptly, a fifth of the rounds

    async def run(self, until: float) -> Ledger:
        while time.monotonic() < until:
            try:
                connection = await self.attach()
            except Dropped:
                self.ledger.count("failed attaches")
                await asyncio.sleep(0.2)
                continue
            try:
                if await self.prompt_rounds(connection, until):
                    await connection.leave()
            except Dropped:  # the server went away, or left a request unanswered
                self.ledger.count("connections lost")
                await connection.drop()
        await self.finish()
        return self.ledger

    async def attach(self) -> Connection:
        try:
            connection = await Connection.open(self.url, self.ledger)
        except (ConnectionError, OSError) as exc:
            raise Dropped() from exc
        params: dict[str, Any] = {"sessionId": self.session_id, "cwd": self.cwd}
        if self.ledger.last_seq:
            params["replayFrom"] = {"type": "_crow/after", "seq": self.ledger.last_seq}
        self.ledger.attaching()
        reply = await connection.request("session/resume", params)
        if "result" not in reply:
            self.ledger.problem("resume refused", str(reply.get("error")))
            await connection.leave()
            raise Dropped()
        self.ledger.count("attaches")
        return connection

    async def prompt_rounds(self, connection: Connection, until: float) -> bool:
        """Prompt until the time is up or this client leaves; False: it dropped."""
        while time.monotonic() < until:
            await connection.wait_idle(timeout=2.0)
            await asyncio.sleep(self.rng.uniform(0, 0.02))  # not all 50 in one tick
            if not await self.one_prompt(connection):
                return False
            if self.rng.random() < 0.03:  # now and then leave properly and come back
                return True
        return True

    async def one_prompt(self, connection: Connection) -> bool:
        rng, ledger = self.rng, self.ledger
        cancel = self.cancels and rng.random() < 0.5
        drop = rng.choice(["after send", "after ack"]) if self.drops and rng.random() < 0.2 else ""
        also = [_cancel_frame(self.session_id)] if cancel else []
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": "soak"}]}
        future = await connection.send("session/prompt", params, also=also)
        ledger.count("prompts")
        if drop == "after send":
            ledger.count("drops")
            await connection.drop()
            return False
        reply = await connection.answer(future, "session/prompt")
        if "result" in reply:
            message_id = reply["result"].get("messageId")
            if not isinstance(message_id, str):
                ledger.problem("bad prompt result", str(reply["result"]))
                return True
            ledger.acked.append(message_id)
            ledger.count("acknowledged" + (" with a cancel" if cancel else ""))
            if drop == "after ack":
                ledger.count("drops")
                await connection.drop()
                return False
            await ledger.wait_ended(message_id, TURN_S)
            return True
        error = reply.get("error") or {}
        if error.get("code") == -32602 and (error.get("data") or {}).get("reason") == "busy":
            ledger.count("busy")
        else:
            ledger.problem("prompt refused", str(error))
        return True

    async def finish(self) -> None:
        """Come back once more, collect the ends of the acknowledged prompts, leave."""
        for _ in range(3):
            try:
                connection = await self.attach()
            except Dropped:
                await asyncio.sleep(0.5)
                continue
            for message_id in self.ledger.unended():
                await self.ledger.wait_ended(message_id, TURN_S)
            await connection.leave()
            return
        self.ledger.problem("cannot reattach", "the final resume failed three times")


def _cancel_frame(session_id: str) -> bytes:
    return orjson.dumps(
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
    )


# ---- the test ---------------------------------------------------------------------
async def warm_up(url: str, cwd: str) -> str:
    """Create the session and run a few turns over each transport (imports, caches)."""
    first = await Connection.open(url.replace("http://", "ws://", 1), Ledger("warm-up ws"))
    created = await first.request("session/new", {"cwd": cwd})
    session_id = created["result"]["sessionId"]
    second = await Connection.open(url, Ledger("warm-up http"))
    await second.request("session/resume", {"sessionId": session_id, "cwd": cwd})
    for connection in (first, second, first, second, first, second):
        await connection.wait_idle(timeout=10)
        reply = await connection.request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": "hi"}]}
        )
        assert "result" in reply, reply
        ended = await connection.ledger.wait_ended(reply["result"]["messageId"], TURN_S)
        assert ended, f"a warm-up turn did not end: {connection.ledger}"
    for connection in (first, second):
        await connection.leave()
        assert not connection.ledger.problems, connection.ledger.problems
    return session_id


def dump(server: Server, sig: signal.Signals) -> None:
    if DUMP:
        os.kill(server.pid, sig)


def report(ledgers: list[Ledger], base: Resources, after: Resources, took: float) -> str:
    totals: dict[str, int] = {}
    for ledger in ledgers:
        for what, n in ledger.counts.items():
            totals[what] = totals.get(what, 0) + n
    lines = [
        f"soak: {len(ledgers)} clients, {SECONDS:.0f} s, seed {SEED}",
        "  " + ", ".join(f"{what} {n}" for what, n in sorted(totals.items())),
        f"  post-warm-up: {base}",
        f"  after leaving (and {IDLE_TIMEOUT_S + QUIET_S + 1 + took:.0f} s): {after}",
    ]
    return "\n".join(lines)


def problems_of(ledgers: list[Ledger]) -> list[str]:
    kinds: dict[str, list[str]] = {}
    for ledger in ledgers:
        for kind, details in ledger.problems.items():
            kinds.setdefault(kind, []).extend(details)
        for message_id in ledger.unended():
            start = ledger.user_seq.get(message_id)
            detail = (
                f"prompt {message_id}: its user_message never reached the client"
                if start is None
                else f"prompt {message_id} (user_message at seq {start}): no idle after it"
            )
            kinds.setdefault("acknowledged prompt without idle", []).append(
                f"{ledger.name}: {detail}"
            )
    lines = []
    for kind, details in sorted(kinds.items()):
        lines.append(f"{kind}: {len(details)}")
        lines += [f"    {d}" for d in details[:SHOWN]]
    return lines


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # dropped sockets, on purpose
async def test_fifty_clients_on_one_session_leave_no_trace(crow_home, scripted_model, tmp_path):
    scripted_model.set_default(Text(text="soak " * 5, chunks=5))
    # Dropped clients' connections expire within the settle time, as they would
    # within a minute by default.
    write_config(
        crow_home, scripted_model.base_url, extra=f"[server]\nidle_timeout_s = {IDLE_TIMEOUT_S}\n"
    )
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = {"CROW_DEBUG_MEMORY": DUMP} if DUMP else {}
    server = Server(tmp_path / "server.log", env)
    try:
        async with asyncio.timeout(SECONDS + SETTLE_S + 300):
            session_id = await warm_up(server.url, str(cwd))
            await asyncio.sleep(QUIET_S + 1)  # the server gives memory back once idle
            base = await settled(server.pid)
            dump(server, signal.SIGUSR1)
            until = time.monotonic() + SECONDS
            rngs = [random.Random(SEED + i) for i in range(CLIENTS)]
            clients = [Client(i, server.url, session_id, str(cwd), rngs[i]) for i in range(CLIENTS)]
            ledgers = await asyncio.gather(*(c.run(until) for c in clients))
            # What stays once the dropped clients' connections have expired and the
            # server has given memory back: the figure the report gives.
            await asyncio.sleep(IDLE_TIMEOUT_S + QUIET_S + 1)
            after, took = await back_to_baseline(server.pid, base, SETTLE_S)
            dump(server, signal.SIGUSR1)
            dump(server, signal.SIGUSR2)
            await asyncio.sleep(2 if DUMP else 0)
    finally:
        alive = server.process.poll() is None
        server.stop()
    summary = report(ledgers, base, after, took)
    print(summary)
    if DUMP:
        print(server.text()[-60_000:])
    problems = problems_of(ledgers) + leaks(base, after)
    if not alive:
        problems.append(f"the server died during the soak:\n{server.text()[-3000:]}")
    assert not problems, summary + "\n" + "\n".join(problems)
