"""Admission through calls: the one greatest fixpoint (design §3.5).

A function is admitted when nothing in it was refused and everything it calls is admitted: a
callee that is seen (in the module, or in any module of a device link) must itself be admitted, a
system call (:data:`SYSTEM_CALLS`) is fine, an indirect call never is, and a callee seen nowhere is
judged by the caller's rule (``outside``). Recursion is allowed (greatest fixpoint). Three stages
use it: the timing pass (one module), the flags pipeline's ``flags_admission`` (the linked eidola
helpers count as seen) and :func:`hbfcc.artifact.resolve_link` (every module of an ``-rdc`` link).
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence

INDIRECT = "<indirect>"   # the callee name the timing pass records for a call through a register

# calls to these external functions do not touch memory the program can register
SYSTEM_CALLS = frozenset({
    "vprintf", "malloc", "free", "__assertfail", "__assert_fail", "cudaGetParameterBufferV2",
    "cudaLaunchDeviceV2", "cudaGetParameterBuffer", "cudaLaunchDevice", "cudaDeviceSynchronize",
    "cudaGetLastError", "cudaPeekAtLastError",
})


def not_seen_by_rewrite(callee: str) -> str:
    """The reason for a callee that one rewrite (one module) does not define."""
    return f"calls external function {callee} (not seen by this rewrite)"


def admit(base_ok: Mapping[str, bool], calls: Mapping[str, Sequence[str]],
          outside: Callable[[str], Optional[str]] = not_seen_by_rewrite) -> dict[str, str]:
    """The greatest fixpoint of admission through calls.

    ``base_ok``: per function (in a fixed order), admitted on its own (nothing refused);
    ``calls``: its callees in call order; ``outside(callee)``: the reason a callee defined by
    none of these functions keeps its caller out (None: it does not).
    Returns, for each function that ``base_ok`` admits but its calls do not, the reason: the first
    failing callee in call order, in the round it fails (rounds run over ``base_ok``'s order)."""
    adm = dict(base_ok)
    why: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name in base_ok:
            if not adm[name]:
                continue
            for c in calls.get(name, ()):
                if c == INDIRECT:
                    reason: Optional[str] = "indirect call (callee not seen)"
                elif c in adm:
                    reason = None if adm[c] else f"calls {c}, which is not admitted"
                elif c in SYSTEM_CALLS:
                    reason = None
                else:
                    reason = outside(c)
                if reason is not None:
                    adm[name] = False
                    why[name] = reason
                    changed = True
                    break
    return why
