"""A bounded, seeded profile-mutation fuzzer (issue 19): whatever a profile file holds,
``load_profile`` either returns a Profile whose control-region values are exactly what the file says,
or raises a :class:`ProfileError` naming the file (never another exception, never a hang).

Mutants are made from the bundled profiles: numbers replaced by huge/negative/NaN/fractional values or
strings, keys removed, duplicated or added, values wrapped in deep nesting, and raw-text damage. The
corpus is generated from a fixed seed (``HBF_PROFILE_FUZZ_SEED`` / ``HBF_PROFILE_FUZZ_N`` widen a local
run); the CI run stays small (a few seconds)."""
from __future__ import annotations

import copy
import json
import math
import os
import random
import time

import pytest

from hbfcommon import ctl
from hbfcommon import profile as prof
from hbfcommon.errors import ErrorCode, ProfileError

SEED = int(os.environ.get("HBF_PROFILE_FUZZ_SEED", "19"))
N_MUTANTS = int(os.environ.get("HBF_PROFILE_FUZZ_N", "400"))
BUDGET_S = float(os.environ.get("HBF_PROFILE_FUZZ_BUDGET_S", "12"))
NAMES = ["conservative", "nominal", "aggressive", "ocp-sg1", "ocp-sg2", "ocp-sg3"]

NUMBERS = [0, -1, 1, 2 ** 31, 2 ** 32, 2 ** 32 - 1, 2 ** 62, 2 ** 63, 2 ** 64, 2 ** 64 + 5, 10 ** 30, -(2 ** 63),
           0.5, 1.5, -0.0, 1e-9, 1e-300, 1e30, 1e300, 1e12, float("nan"), float("inf"), float("-inf"),
           "12", "", "x", None, True, False, [], {}, [1, 2], {"value": 1}]


def _paths(obj, path=()):
    """Every (container, key) in the tree."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield obj, k
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield obj, i
            yield from _paths(v, path + (i,))


def _mutate_tree(rng: random.Random, d):
    d = copy.deepcopy(d)
    for _ in range(rng.randint(1, 3)):
        slots = list(_paths(d))
        if not slots:
            break
        parent, key = rng.choice(slots)
        op = rng.randrange(6)
        if op == 0:                                # a value -> something hostile
            parent[key] = copy.deepcopy(rng.choice(NUMBERS))
        elif op == 1 and isinstance(parent, dict):  # a key removed
            del parent[key]
        elif op == 2 and isinstance(parent, dict):  # a key added
            parent[rng.choice(["extra", "time_scale", "value", "unit", str(key) + "_x"])] = rng.choice(NUMBERS)
        elif op == 3:                              # nesting
            depth = rng.choice([2, 5, 40, 200])
            v = parent[key]
            for _ in range(depth):
                v = [v] if rng.random() < 0.5 else {"value": v}
            parent[key] = v
        elif op == 4 and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            parent[key] = parent[key] * rng.choice([-1, 2 ** 40, 1e-12, 1.0000001, 1e300])
        else:                                      # a whole section replaced
            parent[key] = rng.choice([[], {}, "x", 0])
    return json.dumps(d, allow_nan=True)


def _mutate_text(rng: random.Random, text: str) -> str:
    op = rng.randrange(5)
    if op == 0:                                    # a duplicated key
        i = text.find('"', rng.randrange(len(text)))
        j = text.find(",", i)
        if i < 0 or j < 0:
            return text
        line = text[i:j + 1]
        return text[:i] + line + " " + text[i:] if line.count('"') >= 2 else text
    if op == 1:                                    # truncated
        return text[:rng.randrange(len(text))]
    if op == 2:                                    # a byte replaced
        i = rng.randrange(len(text))
        return text[:i] + rng.choice('{}[],:"0-9eE.\\ \x00') + text[i + 1:]
    if op == 3:                                    # a number replaced by a literal JSON parsers disagree on
        return text.replace('"value": ', '"value": ' + rng.choice(["NaN, ", "Infinity, ", "1e999, ", "-0, ",
                                                                    "9" * 40 + ", ", "0x10, "]), 1)
    return "[" * 5000 + text + "]" * 5000


def _check_loaded(p: prof.Profile) -> None:
    """A profile that loads publishes exactly its values: nothing wraps in hbf_media_params."""
    s = ctl.hbf_media_params()
    for k, v in p.to_media_params().items():
        if isinstance(v, list):
            getattr(s, k)[:] = v
            assert list(getattr(s, k)) == v, k
        else:
            setattr(s, k, v)
            assert getattr(s, k) == v, k
    assert 0 < p.capacity_bytes <= p.geometry.raw_bytes < 2 ** 63
    assert math.isfinite(p.thermal.ambient_c)


def test_profile_mutations_raise_only_profile_errors(tmp_path):
    rng = random.Random(SEED)
    bases = {n: (prof.PROFILE_DIR / f"{n}.json").read_text() for n in NAMES}
    trees = {n: json.loads(t) for n, t in bases.items()}
    t0 = time.monotonic()
    seen = {"loaded": 0, "refused": 0}
    target = tmp_path / "mutant.json"
    for i in range(N_MUTANTS):
        if time.monotonic() - t0 > BUDGET_S:
            break
        name = rng.choice(NAMES)
        text = _mutate_text(rng, bases[name]) if rng.random() < 0.3 else _mutate_tree(rng, trees[name])
        target.write_text(text)
        try:
            p = prof.load_profile(target)
        except ProfileError as e:
            assert e.code == ErrorCode.PROFILE_INVALID
            assert e.fields.get("file") == str(target) and e.fields.get("field"), (i, str(e))
            assert "Traceback" not in str(e)
            seen["refused"] += 1
        except Exception as e:              # noqa: BLE001 - the finding: anything else is a bug
            pytest.fail(f"mutant {i} (seed {SEED}) raised {type(e).__name__}: {e}\n{text[:2000]}")
        else:
            _check_loaded(p)
            seen["loaded"] += 1
    assert seen["refused"] > 0 and sum(seen.values()) >= min(N_MUTANTS, 100), seen


def test_thermal_geometry_mutations_raise_only_geometry_errors(tmp_path):
    """The same mutations of the bundled package geometry (profiles/thermal): only GeometryError, and a
    geometry that loads has a grid within the bounds the thermal model allocates for."""
    from hbfd.thermal.geometry import GEOMETRY_DIR, MAX_CELLS, GeometryError, load_geometry
    rng = random.Random(SEED + 1)
    base = (GEOMETRY_DIR / "hbf-package-8hi.json").read_text()
    tree = json.loads(base)
    target = tmp_path / "mutant.json"
    t0, refused = time.monotonic(), 0
    for i in range(N_MUTANTS // 2):
        if time.monotonic() - t0 > BUDGET_S / 3:
            break
        text = _mutate_text(rng, base) if rng.random() < 0.3 else _mutate_tree(rng, tree)
        target.write_text(text)
        try:
            g = load_geometry(target)
        except GeometryError as e:
            assert e.code == ErrorCode.INVALID_ARGUMENT and e.fields.get("file") == str(target), str(e)
            refused += 1
        except Exception as e:              # noqa: BLE001
            pytest.fail(f"geometry mutant {i} (seed {SEED}) raised {type(e).__name__}: {e}\n{text[:2000]}")
        else:
            assert g.nx * g.ny * sum(L.nz for L in g.layers) <= MAX_CELLS
    assert refused > 0
