"""Machines of a test cluster on one host: each a Linux network namespace on a bridge, with its own /tmp.

`Network` makes a bridge on the host (its address, `host`, is where the test's servers listen) and
one network namespace per machine, joined to the bridge by a veth pair, loopback up. A process
started on a machine (`Network.start`) runs in that namespace and in a mount namespace of its
own (`ip netns exec` makes one per command) in which the machine's host folder is mounted over
/tmp and the folders it must not see are covered by empty tmpfs mounts. `Network.crash` SIGKILLs
every process of a machine at once, as a machine that dies. `Network.close` kills what is left,
deletes the namespaces (which deletes their veths) and the bridge; it also runs at exit.

What stays shared, as namespaces cannot separate it: the process table (the test sees and kills
any process), the host's file system outside /tmp and the covered folders (the installed JDK,
Python and site-packages: software each machine of a real cluster has installed too), the CPU
and the memory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shlex
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add), and this test runs as a user"
    for tool in ("ip", "mount", "unshare"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command here (iproute2, util-linux)"
    # Root in a container may still lack the capabilities (CAP_SYS_ADMIN, CAP_NET_ADMIN).
    probe = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"this process cannot make namespaces: {probe.stderr.strip() or probe.returncode}"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass(frozen=True)
class Machine:
    """One machine: its network namespace, its address on the bridge, and the host folder that is its /tmp."""

    name: str
    address: str
    root: Path

    def path(self, inside: str) -> Path:
        """The host path of `inside`, a path under the machine's /tmp."""
        return self.root / Path(inside).relative_to("/tmp")


class Network:
    """A bridge and machines on it; a context manager that removes them all, also when the test fails."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.tag = f"{random.randrange(16**5):05x}"  # interface names are at most 15 characters
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        free = [n for n in range(32, 250) if f" 10.231.{n}." not in used]
        self.prefix = f"10.231.{random.choice(free)}"
        self.host = f"{self.prefix}.1"
        self.subnet = f"{self.prefix}.0/24"
        self.bridge = f"itb{self.tag}"
        self.machines: list[Machine] = []
        self.processes: list[subprocess.Popen[Any]] = []
        self._closed = False

    def __enter__(self) -> Network:
        atexit.register(self.close)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, role: str) -> Machine:
        """A new machine named `role`, with the next address of the bridge's network."""
        n = len(self.machines) + 2
        machine = Machine(f"icetide-{self.tag}-{role}", f"{self.prefix}.{n}", self.base / role)
        machine.root.mkdir(parents=True, exist_ok=True)
        self.machines.append(machine)  # before it exists, so close() removes a half-made one
        outside, inside = f"itv{self.tag}{n}", f"itp{self.tag}{n}"
        _ip("netns", "add", machine.name)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", machine.name)
        _ip("link", "set", outside, "master", self.bridge, "up")
        _ip("-n", machine.name, "addr", "add", f"{machine.address}/24", "dev", inside)
        _ip("-n", machine.name, "link", "set", inside, "up")
        _ip("-n", machine.name, "link", "set", "lo", "up")
        return machine

    def command(
        self, machine: Machine, argv: Sequence[str], *, hide: Sequence[str | Path] = (), cwd: str = "/tmp"
    ) -> list[str]:
        """The command line that runs `argv` on `machine`: its /tmp is its folder, `hide` covered."""
        steps = [f"mount --bind {shlex.quote(str(machine.root))} /tmp"]
        steps += [f"mount -t tmpfs -o size=1m icetide-hidden {shlex.quote(str(h))}" for h in hide]
        script = " && ".join([*steps, f"cd {shlex.quote(cwd)}", 'exec "$@"'])
        return ["ip", "netns", "exec", machine.name, "sh", "-c", script, "sh", *argv]

    def start(
        self,
        machine: Machine,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        hide: Sequence[str | Path] = (),
        cwd: str = "/tmp",
        stdout: IO[Any] | int | None = None,
    ) -> subprocess.Popen[Any]:
        """Start `argv` on `machine` with exactly the environment `env`; its stderr goes with its stdout."""
        proc = subprocess.Popen(
            self.command(machine, argv, hide=hide, cwd=cwd),
            env=dict(env),
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            text=True,
        )
        self.processes.append(proc)
        return proc

    def run(
        self, machine: Machine, argv: Sequence[str], *, env: Mapping[str, str], hide: Sequence[str | Path] = ()
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on `machine` to its end; its output captured."""
        return subprocess.run(
            self.command(machine, argv, hide=hide), env=dict(env), capture_output=True, text=True, timeout=120
        )

    def pids(self, machine: Machine) -> list[int]:
        """The processes running in the machine's network namespace."""
        done = subprocess.run(["ip", "netns", "pids", machine.name], capture_output=True, text=True, timeout=30)
        return [int(p) for p in done.stdout.split()]

    def crash(self, machine: Machine) -> list[int]:
        """SIGKILL every process of `machine` at once, as a machine that dies; returns their pids.
        Their sockets close with them, so their peers see the connections end at once."""
        killed = self.pids(machine)
        for pid in killed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return killed

    def close(self) -> None:
        """Kill every process on the machines, delete the namespaces and the bridge (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for machine in self.machines:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.crash(machine)
        for proc in self.processes:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                proc.kill()
                proc.wait(timeout=30)
        for n, machine in enumerate(self.machines, start=2):
            subprocess.run(["ip", "netns", "del", machine.name], capture_output=True, timeout=30)
            # Gone with the namespace once its peer moved there; a half-made machine's is deleted here.
            subprocess.run(["ip", "link", "del", f"itv{self.tag}{n}"], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
        atexit.unregister(self.close)
