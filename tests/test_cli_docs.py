"""docs/cli.md stays true to ``pyroce --help``: it lists every command, in the help's order, and
each command's section names each of its options."""

from __future__ import annotations

import argparse
import re

from pyroce.cli import build_parser
from tests.cli import ROOT

CLI_MD = (ROOT / "docs" / "cli.md").read_text()


def commands() -> dict[str, argparse.ArgumentParser]:
    """Each command of ``pyroce --help``, in its order, with its parser."""
    (action,) = (action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    return dict(action.choices.items())


def section(name: str) -> str:
    """The text of the ``## pyroce NAME`` section, heading included."""
    start = re.search(rf"^## pyroce {re.escape(name)}( |$)", CLI_MD, re.MULTILINE)
    assert start, f"docs/cli.md has no section for pyroce {name}"
    end = CLI_MD.find("\n## ", start.end())
    return CLI_MD[start.start() : end if end >= 0 else len(CLI_MD)]


def test_the_intro_lists_every_command_in_the_helps_order() -> None:
    intro = CLI_MD[: CLI_MD.index("\n## ")]
    listed = re.findall(r"`([a-z_-]+)`", intro[intro.index("Commands") : intro.index("lists them")])
    assert listed == list(commands())


def named(option: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def described(name: str) -> str:
    """A command's section and those of the commands it names (``the options are rc_pingpong's``)."""
    text = section(name)
    return "\n".join([text, *(section(other) for other in commands() if other != name and f"{other}`" in text)])


def test_each_commands_section_names_its_options() -> None:
    """Each option, by its long or its short name (``-d``, as ibv_devinfo's users know it)."""
    missing = {name: [action.option_strings[-1] for action in parser._actions
                      if action.help != argparse.SUPPRESS and action.option_strings and "-h" not in action.option_strings
                      and not any(named(option, described(name)) for option in action.option_strings)]
               for name, parser in commands().items()}  # fmt: skip
    assert {name: options for name, options in missing.items() if options} == {}
