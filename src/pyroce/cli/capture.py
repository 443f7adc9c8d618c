"""``pyroce capture``: record what a running pyroce device sends and receives into a pcap file,
as tcpdump does for a NIC. The device is in another process, so the tool asks it through the
stats folder (``host.capture_request``) and the device writes the file itself."""

from __future__ import annotations

import argparse
import heapq
import os
import time
from collections.abc import Callable
from typing import Any, TextIO

from pyroce.cli.errors import CliError
from pyroce.cli.stats import running_devices
from pyroce.host.capture_request import CHECK_EVERY_S, CaptureFiles
from pyroce.host.registry import stats_dir
from pyroce.wire.pcap import PcapWriter, read_pcap

ANSWER_WAIT_S = 5.0  # how long a device may take to start (or stop) capturing
WATCH_EVERY_S = 0.05  # how often the tool looks at the device's answer

DESCRIPTION = """Record every RoCEv2 datagram a running pyroce device sends and receives into
a pcap file (raw IPv4 frames; GSO sends as their segments, so every ICRC verifies under
`pyroce decode` and Wireshark dissects them), until interrupted, N frames or S seconds. The
device, in its own process, writes the file: the path is relative to this directory. A shared
NIC with several engines has each engine record its own programs' packets, merged in time order
into the one file."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("capture", help="record a running device's packets into a pcap file",
                                   description=DESCRIPTION)  # fmt: skip
    parser.add_argument("-d", "--ib-dev", default="pyroce0", help="the device (default pyroce0)")
    parser.add_argument("--pid", type=int, help="the process whose device to capture (see `pyroce stats`)")
    parser.add_argument("-w", dest="file", required=True, metavar="FILE", help="the pcap file to write")
    parser.add_argument("--count", type=int, help="stop after this many frames")
    parser.add_argument("--timeout", type=float, help="stop after this many seconds")
    parser.set_defaults(run=_run)
    return parser


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.count is not None and args.count < 1:
        raise CliError(f"--count must be at least 1, not {args.count}")
    folder = stats_dir()
    pids = choose_processes(folder, args.ib_dev, args.pid)
    assert folder is not None  # a device was found there
    path = os.path.abspath(args.file)
    open(path, "wb").close()  # an unwritable path fails here, in one line
    parts = [path] if len(pids) == 1 else [f"{path}.engine{index}" for index in range(len(pids))]
    files = [CaptureFiles.of(folder, pid, args.ib_dev) for pid in pids]
    for each, part in zip(files, parts):
        each.request_capture(part, args.count)
    whose = f"pid {pids[0]}" if len(pids) == 1 else f"its {len(pids)} engines (pids {', '.join(map(str, pids))})"
    try:
        for each, pid in zip(files, pids):
            state = _await(each, lambda state: state is not None)
            if state is None:
                raise CliError(f"{args.ib_dev} of pid {pid} did not answer in {ANSWER_WAIT_S:g} s")
            if state["state"] == "failed":
                raise CliError(state["error"])
        print(f"capturing {args.ib_dev} of {whose} into {path}", file=out, flush=True)
        _until_done(files, args.timeout)
    finally:
        for each in files:
            each.withdraw()
        for each in files:
            _await(each, lambda state: state is None)  # the device has stopped: the file is whole
    frames = len(read_pcap(path)[1]) if len(parts) == 1 else _merge(parts, path, args.count)
    print(f"{frames} frames written to {path}", file=out)
    return 0


def choose_processes(folder: str | None, device: str, pid: int | None) -> list[int]:
    """The pids of the processes whose ``device`` to capture: ``pid`` if it runs one, else the
    one process that does, or every engine of the one shared NIC that does (each records what
    its own programs' QPs send and receive); CliError naming how to find them otherwise."""
    documents = sorted((document for document in running_devices(folder) if document["device"] == device),
                       key=lambda document: document["pid"])  # fmt: skip
    pids = [document["pid"] for document in documents]
    if pid is not None:
        if pid not in pids:
            raise CliError(f"process {pid} runs no {device} (`pyroce stats` lists the running devices)")
        return [pid]
    if not pids:
        raise CliError(f"no {device} is running (`pyroce stats` lists the running devices)")
    one_nic = all(document.get("engine") for document in documents) and len({d["address"] for d in documents}) == 1
    if len(pids) > 1 and not one_nic:
        raise CliError(f"{len(pids)} processes run {device} (pids {', '.join(map(str, pids))}): choose one with --pid")
    return pids


def _merge(parts: list[str], path: str, count: int | None) -> int:
    """The engines' files as one, in time order (the first ``count`` frames); how many."""
    linktypes, runs = zip(*(read_pcap(part) for part in parts))
    frames = list(heapq.merge(*runs, key=lambda record: record.timestamp))[:count]
    with open(path, "wb") as stream:
        writer = PcapWriter(stream, linktypes[0])
        for record in frames:
            writer.write(record.data, record.timestamp)
    for part in parts:
        os.unlink(part)
    return len(frames)


def _until_done(files: list[CaptureFiles], timeout: float | None) -> None:
    """Until a device has written its count of frames (or one failed), ``timeout``, or Ctrl-C."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while deadline is None or time.monotonic() < deadline:
            states = [each.read_state() for each in files]
            for state in states:
                if state is not None and state["state"] == "failed":
                    raise CliError(state["error"])
            if any(state is None or state["state"] == "done" for state in states):
                return
            time.sleep(WATCH_EVERY_S)
    except KeyboardInterrupt:
        return  # as tcpdump: the capture ends, the file is kept


def _await(files: CaptureFiles, settled: Callable[[dict[str, Any] | None], bool]) -> dict[str, Any] | None:
    """The device's answer once ``settled(answer)`` holds, or as it is after ``ANSWER_WAIT_S``."""
    deadline = time.monotonic() + ANSWER_WAIT_S + CHECK_EVERY_S
    state = files.read_state()
    while not settled(state) and time.monotonic() < deadline:
        time.sleep(WATCH_EVERY_S)
        state = files.read_state()
    return state
