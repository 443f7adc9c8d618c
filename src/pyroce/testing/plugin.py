"""The pytest plugin (entry point ``pyroce``): fixtures over real pyroce devices, a marker for
a misbehaving network, and failure reports that show what the NIC saw.

Each fixture opens pyroce0 for the test and closes it after, so the device a test gets is
made with that test's settings (``rdma_faults``) and nothing carries over between tests: the
fixtures' devices are the process's own NIC, even under ``PYROCE_NIC=shared`` (the shared NIC
is the host's, made before the test, with no faults or capture of one test's). The
``embedded_nic`` marker does the same for a test that opens its own devices and reaches into the
device model (its engine, QPs, simulated time, link faults), so a suite runs under
``PYROCE_NIC=shared`` with those tests still on the NIC they are about.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from pyroce.apps.rc_endpoint import RcEndpoint
from pyroce.link.faults import FaultConfig
from pyroce.nic.capture import Capture
from pyroce.testing.faults import FaultPlan
from pyroce.testing.remote import RemotePeer
from pyroce.verbs.device import Context
from pyroce.wire import NotRoce, opcode_name, parse_frame
from pyroce.wire.errors import MalformedPacket
from pyroce.wire.framing import LINKTYPE_RAW, format_address

MR_SIZE = 4 << 20
REPORT_PACKETS = 20  # the last packets a failure report shows
CAPTURE_KEEP = 10_000
_OPENED = pytest.StashKey[list]()  # what the test's fixtures opened: endpoints, captures, peers
EMBEDDED_NIC = "own"  # PYROCE_NIC's choice of the process's own NIC (pyroce.verbs.device.NIC_CHOICES)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "rdma_faults(loss=0, reorder=0, duplicate=0, corrupt=0, seed=0, script=()): the test's pyroce "
        "device sends through these faults (each a probability per datagram; the same seed gives the "
        "same faults in the same order)",
    )
    config.addinivalue_line(
        "markers",
        "embedded_nic: the test reaches into the device model, so the devices it opens are the process's own "
        "NIC (PYROCE_NIC=own) whatever PYROCE_NIC says",
    )


def use_embedded_nic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Devices opened from here on in this test (and the processes it starts) are their process's own NIC."""
    monkeypatch.setenv("PYROCE_NIC", EMBEDDED_NIC)


@pytest.fixture(autouse=True)
def embedded_nic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``embedded_nic`` opens its devices on its own NIC."""
    if request.node.get_closest_marker("embedded_nic") is not None:
        use_embedded_nic(monkeypatch)


@pytest.fixture
def rdma_faults(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> FaultConfig | None:
    """The test's ``rdma_faults`` marker as a ``FaultConfig`` (None without one), set for the
    devices the test opens (``PYROCE_FAULTS``), which are its own NIC's (the fixtures' devices are)."""
    use_embedded_nic(monkeypatch)
    marker = request.node.get_closest_marker("rdma_faults")
    if marker is None:
        monkeypatch.delenv("PYROCE_FAULTS", raising=False)
        return None
    fields = dict(marker.kwargs)
    script = fields.pop("script", ())
    spec = ",".join([f"{key}={value}" for key, value in fields.items()] + [f"script={rule}" for rule in script])
    try:
        config = FaultConfig.parse(spec)
    except ValueError as exc:
        raise pytest.UsageError(f"rdma_faults: {exc}") from None
    monkeypatch.setenv("PYROCE_FAULTS", spec)
    return config


@pytest.fixture
def rdma_context(request: pytest.FixtureRequest, rdma_faults: FaultConfig | None) -> Iterator[Context]:
    """An open ``Context`` on pyroce0."""
    ctx = Context(name="pyroce0")
    _check_fresh(ctx, rdma_faults)
    yield ctx
    ctx.close()


@pytest.fixture
def rc_pair(request: pytest.FixtureRequest, rdma_faults: FaultConfig | None) -> Iterator[tuple[RcEndpoint, RcEndpoint]]:
    """Two RC endpoints (context, PD, CQ, QP and a 4 MiB MR each) connected to each other in
    this process; their packets take the device's loopback (built, ICRC'd and checked)."""
    with contextlib.ExitStack() as stack:  # whatever fails, nothing stays open for the next test
        a = RcEndpoint.open(MR_SIZE)
        stack.callback(a.close)
        b = RcEndpoint.open(MR_SIZE)
        stack.callback(b.close)
        _check_fresh(a.ctx, rdma_faults)
        _opened(request).extend([a, a.ctx.device.start_capture(CAPTURE_KEEP), b])
        a.connect(b.info())
        b.connect(a.info())
        yield a, b


@pytest.fixture
def rc_remote(
    request: pytest.FixtureRequest, rdma_faults: FaultConfig | None
) -> Iterator[tuple[RcEndpoint, RemotePeer]]:
    """An RC endpoint here connected to a ``RemotePeer`` in another process: real RoCEv2/UDP
    between two devices. The peer keeps receives posted and records the SENDs it gets."""
    with contextlib.ExitStack() as stack:  # whatever fails, nothing stays open for the next test
        peer = RemotePeer(MR_SIZE)
        stack.callback(peer.close)
        local = RcEndpoint.open(MR_SIZE)
        stack.callback(local.close)
        _check_fresh(local.ctx, rdma_faults)
        _opened(request).extend([local, local.ctx.device.start_capture(CAPTURE_KEEP), peer])
        peer.connect(local)
        yield local, peer


@pytest.fixture
def rdma_capture(request: pytest.FixtureRequest, rdma_context: Context) -> Iterator[Capture]:
    """Every datagram pyroce0 sends and receives during the test (``Capture.write`` makes a
    pcap that ``pyroce decode`` and tshark read)."""
    capture = rdma_context.device.start_capture()
    _opened(request).append(capture)
    yield capture
    rdma_context.device.stop_capture()


@pytest.fixture
def rdma_fault_plan(request: pytest.FixtureRequest, rdma_context: Context) -> Iterator[FaultPlan]:
    """A ``FaultPlan`` for pyroce0 (seeded by the test's ``rdma_faults`` marker, else 0):
    verbs that fail with a chosen errno, forced RNR, QP errors, CQ overruns, the port down."""
    marker = request.node.get_closest_marker("rdma_faults")
    plan = FaultPlan(rdma_context.device, seed=int(marker.kwargs.get("seed", 0)) if marker else 0)
    yield plan
    plan.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.when == "call" and item.stash.get(_OPENED, None):
        report.sections.append(("pyroce", _describe(item.stash[_OPENED])))
    return report


def _opened(request: pytest.FixtureRequest) -> list:
    return request.node.stash.setdefault(_OPENED, [])


def _check_fresh(ctx: Context, faults: FaultConfig | None) -> None:
    """The device must have been made for this test: one kept open elsewhere would not have
    its faults."""
    active = ctx.device.engine.port.faults
    if (active.config if active is not None else None) != (faults if faults is not None and faults.active else None):
        ctx.close()
        raise pytest.UsageError("pyroce0 was already open with other fault settings: close it before this test")


def _describe(opened: list) -> str:
    """Failed completions with their reasons, counters, and the last packets."""
    lines: list[str] = []
    for thing in opened:
        if isinstance(thing, RcEndpoint):
            for wc in thing.failed:
                lines.append(f"failed: {wc}")
    devices = {id(t.ctx.device): t.ctx.device for t in opened if isinstance(t, RcEndpoint)}
    for device in devices.values():
        counters = {name: value for name, value in device.stats().items() if value}
        lines.append(f"{device.name} at {device.address}: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    for thing in opened:
        if isinstance(thing, RemotePeer) and thing.process.is_alive():
            counters = {name: value for name, value in thing.stats().items() if value}
            lines.append("peer process: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    for thing in opened:
        if isinstance(thing, Capture):
            frames = list(thing.frames)[-REPORT_PACKETS:]
            lines.append(f"last {len(frames)} of {len(thing.frames)} packets:")
            lines += [_packet_line(frame) for _, frame in frames]
    return "\n".join(lines)


def _packet_line(frame: bytes) -> str:
    try:
        parsed = parse_frame(frame, LINKTYPE_RAW)
    except (NotRoce, MalformedPacket) as exc:
        return f"  (not a RoCEv2 packet: {exc})"
    bth = parsed.packet.bth
    aeth = f" aeth=0x{parsed.packet.aeth.syndrome:02x}" if parsed.packet.aeth is not None else ""
    return (f"  {format_address(parsed.ip.src)} > {format_address(parsed.ip.dst)} {opcode_name(bth.opcode)} "
            f"qpn=0x{bth.dqpn:06x} psn=0x{bth.psn:06x} pay={len(parsed.packet.payload)}{aeth}"
            f"{'' if parsed.icrc_ok else ' icrc=BAD'}")  # fmt: skip
