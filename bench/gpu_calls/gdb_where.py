# cuda-gdb script (stop 45): where the GPU threads of a stopped process stand, grouped by PC. Loaded with
#   cuda-gdb -p PID -batch -x bench/gpu_calls/gdb_where.py
# Prints `info cuda kernels`, then `info cuda threads` (cuda-gdb coalesces threads at the same PC), then for each
# distinct PC (at most 24) the symbol it lies in, the instructions around it and one thread's backtrace.
import re

import gdb  # noqa: F401  (provided by cuda-gdb)


def run(cmd: str) -> str:
    try:
        return gdb.execute(cmd, to_string=True)
    except gdb.error as e:  # keep going: one failing command must not end the report
        return f"<{cmd}: {e}>\n"


def main() -> None:
    gdb.write(run("info cuda kernels"))
    threads = run("info cuda threads")
    gdb.write(threads[:60000] + "\n")
    seen: dict[str, str] = {}
    for line in threads.splitlines():
        m = re.search(r"\((\d+),(\d+),(\d+)\)\s+\((\d+),(\d+),(\d+)\)\s+\(\d+,\d+,\d+\)\s+\(\d+,\d+,\d+\)\s+(\d+)\s+(0x[0-9a-f]+)",
                      line)
        if not m:
            continue
        pc = m.group(8)
        if pc not in seen:
            seen[pc] = f"block ({m.group(1)},{m.group(2)},{m.group(3)}) thread ({m.group(4)},{m.group(5)},{m.group(6)})"
    gdb.write(f"== {len(seen)} distinct PCs\n")
    for pc, where in list(seen.items())[:24]:
        gdb.write(f"== PC {pc} first at {where}\n")
        gdb.write(run(f"info symbol {pc}"))
        gdb.write(run(f"cuda {where}"))
        gdb.write(run("bt 12"))
        gdb.write(run("x/6i $pc-32"))
        gdb.write(run("info cuda lanes"))
        gdb.write(run("info registers"))
    gdb.write(run("detach"))


main()
