"""hbfd's and hbfctl's command lines (issue 18, item 5): argparse subcommands with their own help; a
command line they cannot take is ONE line on stderr naming the mistake and the valid choices, exit 2, no
traceback; the original `hbfd --profile P` form keeps working beside `hbfd serve --profile P`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hbfd import cli, ctl_cli
from hbfd_harness import ROOT


def _main(fn, argv, capsys) -> tuple[int, str, str]:
    try:
        rc = fn(list(argv))
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(rc, out, err, *needles):
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "usage:" not in err
    for n in needles:
        assert n in err, (n, err)


# ---- hbfd ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needles", [
    ([], ["choose a command", "serve, bench, thermal", "hbfd --profile nominal"]),
    (["bnch"], ["unknown command 'bnch'", "serve, bench, thermal", "did you mean 'bench'"]),
    (["frobnicate"], ["unknown command 'frobnicate'", "serve, bench, thermal"]),
    (["bench"], ["hbfd bench: error: choose a tool", "media"]),
    (["bench", "medai"], ["unknown tool 'medai'", "valid: media", "did you mean 'media'"]),
    (["thermal"], ["hbfd thermal: error: choose a tool", "validate"]),
    (["thermal", "valdate"], ["unknown tool 'valdate'", "valid: validate"]),
    (["serve"], ["hbfd serve: error: --profile is required"]),
    (["--prfile", "nominal"], ["unknown option '--prfile'", "--profile", "--socket", "did you mean '--profile'"]),
    (["--prof", "nominal"], ["unknown option '--prof'", "--profile"]),        # never abbreviated
    (["serve", "--profile", "nominal", "--bogus"], ["hbfd serve: error: unknown option '--bogus'", "--summary"]),
    (["--profile", "nominal", "extra"], ["unexpected argument 'extra'"]),
    (["serve", "--profile"], ["--profile: expected one argument"]),
    (["thermal", "validate", "--secnds", "3"], ["hbfd thermal validate: error: unknown option '--secnds'",
                                                "did you mean '--seconds'", "--progress-s"]),
    (["bench", "media", "--prfile", "nominal"], ["hbfd bench media: error: unknown option '--prfile'",
                                                 "did you mean '--profile'"]),   # not "--profile is required"
    (["bench", "media", "--profile", "nominal", "--requests", "abc"], ["argument --requests: invalid int value"]),
    (["bench", "media", "--profile", "nominal", "--op", "rd"], ["unknown value for --op 'rd'", "read, write, mixed"]),
    (["bench", "media", "--profile", "nominal", "--repeat", "0"], ["--repeat must be >= 1"]),
    (["bench", "media", "--profile", "nominal", "--write-fraction", "2"], ["--write-fraction must be in [0, 1]"]),
])
def test_hbfd_bad_command_lines_are_one_line_errors(argv, needles, capsys):
    _one_line_error(*_main(cli.main, argv, capsys), *needles)


@pytest.mark.parametrize("argv,needles", [
    (["--help"], ["serve", "bench", "thermal", "--version", "hbfd serve --profile P"]),
    (["serve", "--help"], ["--profile", "--socket", "--summary", "--engine", "bundled profile by name",
                           "atomic replace"]),
    (["--profile", "x", "--help"], ["usage: hbfd serve"]),                 # the original form is serve
    (["bench", "--help"], ["media", "synthetic request stream"]),
    (["thermal", "--help"], ["validate", "ROM", "progress"]),
    (["thermal", "validate", "--help"], ["usage: hbfd thermal validate", "--progress-s", "--committed"]),
    (["bench", "media", "--help"], ["usage: hbfd bench media"]),          # reaches the tool's own parser
])
def test_hbfd_help_per_command(argv, needles, capsys):
    rc, out, err = _main(cli.main, argv, capsys)
    assert rc == 0 and err == "", (rc, err)
    flat = " ".join(out.split())                    # help text wraps with the terminal width
    for n in needles:
        assert n in flat, (n, out)


def test_hbfd_tool_dispatch_passes_its_arguments():
    """`hbfd bench media ...` runs the tool with exactly the arguments after its name."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "hbfd.cli", "bench", "media", "--profile", "nominal", "--requests",
                        "200", "--bytes", "4096", "--op", "read", "--arrival-gap-ns", "1000", "--json"],
                       capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)


def test_no_traceback_from_the_console_entry(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for argv in (["bench"], ["thermal"], ["--bogus"], ["bnch", "media"]):
        r = subprocess.run([sys.executable, "-m", "hbfd.cli", *argv], capture_output=True, text=True, timeout=60,
                           env=env, cwd=tmp_path)
        _one_line_error(r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("form", [["serve"], []], ids=["serve", "original-form"])
def test_serve_and_the_original_form_both_run_the_daemon(form, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), HBFD_ENGINE="fixed", HBFD_THERMAL="none", HBFD_REFRESH="none")
    sock, summ, logp = tmp_path / "s.sock", tmp_path / "summary.json", tmp_path / "hbfd.log"

    def ctl(*a):
        return subprocess.run([sys.executable, "-m", "hbfd.ctl_cli", *a, "--socket", str(sock)],
                              capture_output=True, text=True, timeout=60, env=env)
    with open(logp, "w") as log:
        p = subprocess.Popen([sys.executable, "-m", "hbfd.cli", *form, "--profile", "nominal", "--socket", str(sock),
                              "--summary", str(summ)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while (r := ctl("status", "--json")).returncode != 0 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.returncode == 0, (r.stderr, logp.read_text())
        assert json.loads(r.stdout)["daemon_pid"] == p.pid
        assert ctl("shutdown").returncode == 0
        assert p.wait(30) == 0
        assert json.loads(summ.read_text())["terminal_status"] == "clean"
        assert "hbfd ready: profile nominal" in logp.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---- hbfctl ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,needles", [
    ([], ["choose a command", "status, ranges, summary, shutdown, thermal-override"]),
    (["stats"], ["unknown command 'stats'", "did you mean 'status'", "thermal-override"]),
    (["status", "--bogus"], ["hbfctl status: error: unknown option '--bogus'", "--socket", "--json"]),
    (["status", "--reason", "x"], ["unknown option '--reason'"]),            # shutdown's, not status's
    (["ranges", "extra"], ["unexpected argument 'extra'"]),
    (["thermal-override"], ["required: MODE"]),
    (["thermal-override", "lite"], ["unknown mode 'lite'", "Normal, Light, Severe, Shutdown, clear"]),
    (["thermal-override", "clear", "--q-ppm", "5"], ["clear takes no --q-ppm"]),
    (["thermal-override", "Light", "--q-ppm", "half"], ["--q-ppm: invalid int value"]),
    (["--sock", "x", "status"], ["unknown option '--sock'"]),
])
def test_hbfctl_bad_command_lines_are_one_line_errors(argv, needles, capsys):
    _one_line_error(*_main(ctl_cli.main, argv, capsys), *needles)


@pytest.mark.parametrize("cmd,needles", [
    ("status", ["Heartbeat", "SHA-256", "service fraction q", "modeled_ns", "wall_ns", "overhead_ns",
                "sums over requests"]),
    ("ranges", ["TIMING", "permissions", "media"]),
    ("summary", ["terminal state", "per-op counters"]),
    ("shutdown", ["DAEMON_LOST", "atomic replace", "--reason"]),
    ("thermal-override", ["HBFD_THERMAL=hbfd.thermal.override:make_service", "MODE", "--q-ppm", "Severe"]),
])
def test_hbfctl_help_per_command(cmd, needles, capsys):
    rc, out, err = _main(ctl_cli.main, [cmd, "--help"], capsys)
    assert rc == 0 and err == ""
    assert out.startswith(f"usage: hbfctl {cmd}")
    flat = " ".join(out.split())
    for n in needles:
        assert n in flat, (n, out)


def test_hbfctl_top_help_lists_every_command(capsys):
    rc, out, _ = _main(ctl_cli.main, ["--help"], capsys)
    assert rc == 0
    for c in ctl_cli.COMMANDS:
        assert c in out
    assert "--version" in out and "Exit status" in out


@pytest.mark.parametrize("argv", [["--socket", "{s}", "status"], ["status", "--socket", "{s}"],
                                  ["--json", "summary", "--socket", "{s}"]])
def test_hbfctl_options_before_or_after_the_command(argv, tmp_path, capsys):
    s = str(tmp_path / "absent.sock")
    rc, out, err = _main(ctl_cli.main, [a.format(s=s) for a in argv], capsys)
    assert rc == 2 and out == ""
    assert err == f"hbfctl: no hbfd is running on {s} (start one: hbfd --profile nominal)\n"


def test_hbfctl_thermal_mode_any_case():
    ns = ctl_cli.build_parser().parse_args(["thermal-override", "light", "--q-ppm", "5"])
    assert ns.mode == "Light" and ns.q_ppm == 5
    assert ctl_cli.build_parser().parse_args(["thermal-override", "CLEAR"]).mode == "clear"
