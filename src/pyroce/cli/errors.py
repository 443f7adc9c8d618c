"""The one exception the tools raise for a user's mistake or a failed run: ``pyroce.cli.main``
prints it as one line, ``pyroce <tool>: error: <message>``, and exits 1."""


class CliError(Exception):
    """A failure to report in one line; the message names what failed and, if it can, what to do."""
