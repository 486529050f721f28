"""Command lines: the one argparse flavour of hbfsim's tools (hbfd, hbfctl).

A mistake on the command line is one line on stderr naming what is wrong and what would be valid, exit
status 2, never a traceback and never a wall of usage text:

    hbfd: error: unknown command 'bnch' (valid: serve, bench, thermal; did you mean 'bench'?) -- see `hbfd --help`
    hbfd serve: error: unknown option '--prfile' (valid: --profile, --socket, ...; did you mean '--profile'?) -- ...

Options are never abbreviated (``allow_abbrev=False``): a typo is an error, not a guess. :func:`parse`
parses with a tree of subcommands and names an unknown option against the subcommand it was given to.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Sequence

EXIT_USAGE = 2
_CHOICE = re.compile(r"argument (?P<arg>.+?): invalid choice: (?P<val>.+?) \(choose from (?P<choices>.*)\)$")
_PARSER_KEY = "_hbf_cli_parser"
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")      # argparse's own test for a negative number


def _unquote(s: str) -> str:
    s = s.strip()
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s


def _did_you_mean(word: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line naming the mistake and the valid choices."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.set_defaults(**{_PARSER_KEY: self})

    def option_strings(self) -> list[str]:
        """The long (else short) spelling of every option this parser takes, help included."""
        out = []
        for a in self._actions:
            if a.option_strings:
                longs = [o for o in a.option_strings if o.startswith("--")]
                out.append((longs or a.option_strings)[0])
        return out

    def subcommands(self) -> list[str]:
        return [name for a in self._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]

    def explain(self, message: str) -> str:
        m = _CHOICE.match(message)
        if m:
            val = _unquote(m.group("val"))
            choices = [_unquote(c) for c in m.group("choices").split(",")]
            arg = m.group("arg")
            what = arg.lower() if arg.isupper() else f"value for {arg}"
            return f"unknown {what} {val!r} (valid: {', '.join(choices)}{_did_you_mean(val, choices)})"
        return message

    def error(self, message: str):  # noqa: D401 (argparse's hook)
        self.fail(self.explain(message))

    def fail(self, message: str):
        """Print ``PROG: error: MESSAGE -- see `PROG --help``` and exit 2."""
        sys.stderr.write(f"{self.prog}: error: {message} -- see `{self.prog} --help`\n")
        sys.exit(EXIT_USAGE)

    def unknown_argument(self, arg: str):
        if arg.startswith("-") and len(arg) > 1:
            opts = self.option_strings()
            name = arg.split("=", 1)[0]
            if not opts:
                self.fail(f"unknown option {name!r}")
            self.fail(f"unknown option {name!r} (valid: {', '.join(opts)}{_did_you_mean(name, opts)})")
        subs = self.subcommands()
        if subs:
            self.fail(f"unknown command {arg!r} (valid: {', '.join(subs)}{_did_you_mean(arg, subs)})")
        self.fail(f"unexpected argument {arg!r}")


def _all_option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def parse(parser: Parser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; an argument nobody takes is reported by the (sub)parser it was given to (an unknown
    option before the command is named as such, not as an unknown command made of its value)."""
    argv = list(argv)
    subs, known = set(parser.subcommands()), _all_option_strings(parser)
    # before the command (or, for a parser without commands, anywhere): an option nobody takes is named
    # as such, before argparse would report a required option as missing
    for tok in argv:
        if tok in subs or tok == "--":
            break
        if (tok.startswith("-") and len(tok) > 1 and not _NEGATIVE.match(tok)
                and tok.split("=", 1)[0] not in known):
            parser.unknown_argument(tok)
    ns, extra = parser.parse_known_args(argv)
    if extra:
        owner = getattr(ns, _PARSER_KEY, parser)
        owner.unknown_argument(extra[0])
    return ns


def chosen_parser(ns: argparse.Namespace, default: Parser) -> Parser:
    """The deepest (sub)parser that took part in parsing ``ns``."""
    return getattr(ns, _PARSER_KEY, default)
