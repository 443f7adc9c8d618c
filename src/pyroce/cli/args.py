"""argparse ``type=`` functions: a bad value is refused before anything runs, in one line that
argparse prefixes with the option's name (``argument --serve: port 99999 is not 0..65535``)."""

from __future__ import annotations

import argparse
import socket

MAX_PORT = 65535


def port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0..{MAX_PORT})") from None
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port {value} is not 0..{MAX_PORT}")
    return value


def _host(host: str) -> str:
    """``host`` resolved to an IPv4 address, so a typo fails here and not after a timeout."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]  # type: ignore[no-any-return]
    except (socket.gaierror, UnicodeError) as exc:
        detail = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise argparse.ArgumentTypeError(f"cannot resolve host {host!r}: {detail}") from None


def listen_endpoint(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` to listen on; HOST defaults to every address (0.0.0.0)."""
    host, _, number = text.rpartition(":")
    return (_host(host) if host else "0.0.0.0"), port(number)


def peer_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of a peer; port 0 cannot be connected to."""
    host, colon, number = text.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    value = port(number)
    if value == 0:
        raise argparse.ArgumentTypeError("port 0 cannot be connected to")
    return _host(host), value


def probability(text: str) -> float:
    """A probability, 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"probability {text} is not between 0 and 1")
    return value


def seconds(text: str) -> float:
    """A positive duration in seconds."""
    value = _number_of_seconds(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} s is not a positive duration")
    return value


def seconds_or_zero(text: str) -> float:
    """A duration in seconds, or 0 (for "never")."""
    value = _number_of_seconds(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} s is not 0 or a positive duration")
    return value


def _number_of_seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
