"""Read a process's memory and CPU time, and the machine's CPU time, from ``/proc``."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """``VmRSS`` (or another ``Vm*`` field) of ``pid`` in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far (all its threads)."""
    user, system = cpu_times(pid)
    return user + system


def cpu_times(pid: int, tid: int | None = None) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` (or of its thread ``tid``)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def context_switches(pid: int) -> int:
    """Voluntary plus involuntary context switches of all of ``pid``'s threads."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as status:
                for line in status:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except FileNotFoundError:  # the thread ended meanwhile
            continue
    return total


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def machine_busy_seconds() -> float:
    """CPU time all cores spent busy (not idle, not waiting on I/O) since boot."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / _TICKS


def children_cpu_seconds() -> float:
    """CPU time of this process's children that have exited and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(slots=True)
class CpuWindow:
    """CPU used over a time window by each watched process, wrk, this process and the rest.

    Values are in cores (CPU seconds per wall second): 1.0 is one core fully busy. The
    process named ``hop`` (the floor or gateway) gets details: its main (event loop)
    thread, its system time, its threads and its context switches per second.
    """

    pids: dict[str, int]
    _start: dict[str, float] | None = None
    _wall: float = 0.0

    def start(self, now: float) -> None:
        self._wall = now
        self._start = self._snapshot()

    def stop(self, now: float) -> dict[str, float]:
        assert self._start is not None
        end = self._snapshot()
        elapsed = max(now - self._wall, 1e-9)
        used = {name: (end[name] - self._start[name]) / elapsed for name in end}
        machine = used.pop("machine")
        details = {name: used.pop(name) for name in list(used) if name.startswith("hop ")}
        used["other"] = max(0.0, machine - sum(used.values()))
        used["machine"] = machine
        used |= details
        if "hop" in self.pids:
            used["hop threads"] = thread_count(self.pids["hop"])
        return {name: round(value, 3) for name, value in used.items()}

    def _snapshot(self) -> dict[str, float]:
        snapshot = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        if "hop" in self.pids:
            hop = self.pids["hop"]
            snapshot["hop main thread"] = sum(cpu_times(hop, hop))
            snapshot["hop system"] = cpu_times(hop)[1]
            snapshot["hop context switches"] = context_switches(hop)
        snapshot["wrk"] = children_cpu_seconds()
        snapshot["bench client"] = own_cpu_seconds()
        snapshot["machine"] = machine_busy_seconds()
        return snapshot
