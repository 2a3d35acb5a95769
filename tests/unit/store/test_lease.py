"""Who owns a turn: a process's identity survives pid reuse; other hosts expire."""

from __future__ import annotations

import subprocess
import sys

from crow.store.lease import expiry, owner_alive, this_process


def test_this_process_is_alive_under_its_own_name():
    assert owner_alive(this_process(), None)


def test_nobody_and_a_dead_pid_are_not_alive():
    assert not owner_alive(None, None)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = this_process().split(":")[0]
    assert not owner_alive(f"{host}:{child.pid}:1", expiry())


def test_a_reused_pid_is_not_the_owner():
    host, pid, start = this_process().split(":")
    other_start = str(int(start) + 1) if start.isdigit() else "1"
    assert not owner_alive(f"{host}:{pid}:{other_start}", expiry())


def test_an_owner_on_another_host_lives_as_long_as_its_lease():
    assert owner_alive("elsewhere:1:1", lease_expires=200.0, now=100.0)
    assert not owner_alive("elsewhere:1:1", lease_expires=50.0, now=100.0)
    assert not owner_alive("elsewhere:1:1", lease_expires=None, now=100.0)


def test_a_killed_owner_its_parent_has_not_reaped_is_not_alive():
    import time
    from pathlib import Path

    from crow.runtime.proc import start_time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    host = this_process().split(":")[0]
    owner = f"{host}:{child.pid}:{start_time(child.pid)}"
    assert owner_alive(owner, expiry())
    child.kill()  # a zombie now: nobody has waited for it yet
    while b") Z " not in Path(f"/proc/{child.pid}/stat").read_bytes():
        time.sleep(0.01)
    assert not owner_alive(owner, expiry())
    child.wait()
