"""Every CLI command has ``--help`` that explains it: each command and group says what it does,
and each of its options says what it is for (click prints an option without help as its type
alone, e.g. ``--priority INTEGER RANGE``)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from jobledger.cli import cli


def _commands(
    command: click.Command, path: tuple[str, ...], ctx: click.Context
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, (path, name)
            yield from _commands(sub, (*path, name), click.Context(sub, parent=ctx))


def test_every_command_and_option_explains_itself() -> None:
    found = list(_commands(cli, ("jobledger",), click.Context(cli)))
    assert len(found) > 30, "the walk should reach every subcommand"
    silent = [" ".join(path) for path, command in found if not (command.help or command.short_help)]
    assert silent == [], "commands without help"
    bare = [
        f"{' '.join(path)} {option.opts[0]}"
        for path, command in found
        for option in command.params
        if isinstance(option, click.Option) and not option.hidden and not option.help
    ]
    assert bare == [], "options without help"
