"""hbfcommon.cliargs: the one argparse flavour of hbfd/hbfctl (one-line errors naming the mistake and the
valid choices, no abbreviations, an unknown option named against the subcommand it was given to)."""
from __future__ import annotations

import pytest

from hbfcommon.cliargs import Parser, chosen_parser, parse


def _tree() -> Parser:
    ap = Parser(prog="tool")
    ap.add_argument("--socket")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    run = sub.add_parser("run")
    run.add_argument("--level", type=float)
    run.add_argument("--colour", choices=["red", "green"])
    sub.add_parser("stop")
    return ap


def _err(argv, capsys) -> str:
    with pytest.raises(SystemExit) as ei:
        parse(_tree(), argv)
    assert ei.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    return err


def test_unknown_option_is_named_by_its_subcommand(capsys):
    err = _err(["run", "--levl", "3"], capsys)
    assert err.startswith("tool run: error: unknown option '--levl' (valid: --help, --level, --colour; "
                          "did you mean '--level'?)")
    assert err.rstrip().endswith("-- see `tool run --help`")


def test_unknown_option_before_the_command_is_not_called_a_command(capsys):
    err = _err(["--sockt", "s", "run"], capsys)
    assert "unknown option '--sockt'" in err and "unknown command" not in err


def test_unknown_command_and_value(capsys):
    assert "unknown command 'runn' (valid: run, stop; did you mean 'run'?)" in _err(["runn"], capsys)
    assert "unknown value for --colour 'blue' (valid: red, green)" in _err(["run", "--colour", "blue"], capsys)


def test_no_abbreviations(capsys):
    assert "unknown option '--lev'" in _err(["run", "--lev", "3"], capsys)


def test_negative_numbers_and_the_chosen_parser():
    ap = _tree()
    ns = parse(ap, ["--socket", "s", "run", "--level", "-1.5"])
    assert ns.level == -1.5 and ns.socket == "s" and ns.command == "run"
    assert chosen_parser(ns, ap).prog == "tool run"
    assert chosen_parser(parse(ap, []), ap) is ap


@pytest.mark.parametrize("message", [
    "argument COMMAND: invalid choice: 'x' (choose from 'run', 'stop')",      # Python 3.11
    "argument COMMAND: invalid choice: 'x' (choose from run, stop)",          # Python 3.12.8+
])
def test_invalid_choice_wording_of_each_python(message):
    assert Parser(prog="t").explain(message) == "unknown command 'x' (valid: run, stop)"
