"""One command line: every parser says ``rankcheck``, every option has help and shows its default, errors show the
subcommand's usage, ``--version`` works, and docs/cli.md is the parsers' help as they print it now."""

import argparse
import importlib.metadata

import pytest

from harness import cli, cli_docs

FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction, argparse._VersionAction,
                argparse._CountAction, argparse._SubParsersAction)


def every_action():
    """(command, action) for every argument of every command and subcommand parser."""
    for name, parser in cli_docs.command_parsers().items():
        for action in parser._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, FLAG_ACTIONS):
                yield name, parser, action


def test_docs_cli_md_is_the_parsers_help_now():
    assert cli_docs.PAGE.read_text(encoding="utf-8") == cli_docs.render(), (
        "docs/cli.md is stale: run .venv/bin/python -m harness.cli_docs")


def test_every_parser_is_rankcheck():
    for name, parser in cli_docs.command_parsers().items():
        assert parser.prog == name, (name, parser.prog)
        assert parser.format_usage().startswith(f"usage: {name}"), name


def test_every_subcommand_has_help_and_a_description():
    top = cli_docs.command_parsers()["rankcheck"]
    action = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in action._choices_actions}
    assert set(helps) == set(cli_docs.subcommands(top)) and all(helps.values()), helps
    assert not any("--help`" in text for text in helps.values())  # real words, not "see rankcheck X --help"


def test_every_option_has_help_that_shows_its_default():
    missing, no_default = [], []
    for name, parser, action in every_action():
        label = f"{name} {'/'.join(action.option_strings) or action.dest}"
        if not action.help:
            missing.append(label)
            continue
        shown = parser.formatter_class(prog=parser.prog)._get_help_string(action)
        if action.option_strings and not action.required and "default" not in shown:
            no_default.append(label)
    assert missing == [], f"options without help: {missing}"
    assert no_default == [], f"options whose help shows no default: {no_default}"


def test_an_unknown_option_prints_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate", "--no-such-option"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rankcheck validate") and "unrecognized arguments: --no-such-option" in err


def test_version_is_the_installed_one(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"rankcheck {importlib.metadata.version('rankcheck')}"


def test_bench_report_is_a_subcommand_and_its_module_alias_is_the_same_parser(capsys):
    from harness.bench import report  # noqa: PLC0415 - imports torch

    assert cli.main(["bench", "report"]) == 2  # neither a result nor --compare: its own usage, exit 2
    err = capsys.readouterr().err
    assert err.startswith("usage: rankcheck bench report")
    assert report.main([]) == 2
    assert capsys.readouterr().err == err
