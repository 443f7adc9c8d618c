"""The result of a ``pyroce demo`` run, as the text table or as one JSON document (docs/cli.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


class Side(NamedTuple):
    address: str
    pid: int


class Row(NamedTuple):
    operation: str
    messages: int
    bytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds else 0.0


@dataclass(frozen=True)
class Report:
    client: Side
    server: Side
    path_mtu: int  # bytes
    sizes: tuple[int, ...]
    rows: list[Row]
    counters: dict[str, int]  # both devices' counters, summed
    mismatches: list[str]
    operations: int  # checks made

    @property
    def bytes(self) -> int:
        return sum(row.bytes for row in self.rows)

    def verdict(self) -> dict[str, int]:
        """What the client tells the server at the end, and the last line shows."""
        return {"operations": self.operations, "bytes": self.bytes, "errors": len(self.mismatches)}

    def injected(self) -> dict[str, int]:
        return {name[len("injected_") :]: n for name, n in self.counters.items() if name.startswith("injected_")}

    def lines(self) -> list[str]:
        """The table and the checks, after ``header_line``; the last line is ``verified: ...``."""
        lines = [f"{'operation':<22}{'messages':>10}{'bytes':>12}{'MB/s':>10}"]
        lines += [f"{r.operation:<22}{r.messages:>10}{r.bytes:>12}{r.mb_per_s:>10.2f}" for r in self.rows]
        get = self.counters.get
        lines.append(f"packets: {get('sent_pkts', 0)} sent, {get('rcvd_pkts', 0)} received, "
                     f"{get('icrc_errors', 0)} with a bad ICRC")  # fmt: skip
        if injected := self.injected():
            faults = ", ".join(f"{name} {n}" for name, n in injected.items())
            lines.append(f"faults injected: {faults}; retransmitted {get('retransmitted_pkts', 0)} packets "
                         f"({get('local_ack_timeout_err', 0)} timeouts, {get('rcvd_seq_err', 0)} sequence NAKs, "
                         f"{get('implied_naks', 0)} implied NAKs)")  # fmt: skip
        lines += [f"MISMATCH: {error}" for error in self.mismatches]
        lines.append(verified_line(self.verdict()))
        return lines

    def document(self) -> dict[str, Any]:
        return {
            "client": self.client._asdict(),
            "server": self.server._asdict(),
            "path_mtu": self.path_mtu,
            "sizes": list(self.sizes),
            "operations": [{**row._asdict(), "mb_per_s": row.mb_per_s} for row in self.rows],
            "counters": self.counters,
            "faults_injected": self.injected(),
            "mismatches": self.mismatches,
            "verified": self.verdict(),
        }


def verified_line(verdict: dict[str, int]) -> str:
    return f"verified: {verdict['operations']} operations, {verdict['bytes']} bytes, {verdict['errors']} errors"


def header_line(client: Side, server: Side, path_mtu: int, sizes: tuple[int, ...]) -> str:
    """The first line of the text report: who talks to whom, how."""
    return (f"pyroce demo: {client.address} (pid {client.pid}) <-> {server.address} (pid {server.pid}), "
            f"RC, path MTU {path_mtu} B, sizes {min(sizes)} B .. {max(sizes) >> 20} MiB")  # fmt: skip
