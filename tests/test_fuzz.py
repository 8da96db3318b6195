"""Fuzz the tensor-file readers with mutated real fixtures: only ReportDBError (or success) may come out.

Every fixture file (``*/files/*`` and report ``tensors/*``, ``.pt`` included) is mutated with bit
flips, truncations, garbage and extreme values written over size-like fields, and byte
insertions/deletions, from a fixed seed. The loop runs in a subprocess whose address space is
capped at 2 GiB, so a reader that trusted a size and allocated from it fails loudly instead of
swapping the machine; each case has a time limit, so a hang is reported as such.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"
CASES = 10_000
SEED = 20240405
CASE_SECONDS = 5.0
ADDRESS_SPACE = 2 << 30
EXTREMES = [0, 1, 7, 8, 9, 255, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1]


def fixture_files() -> list[Path]:
    """Every real tensor file the readers accept."""
    files = sorted(FIXTURES.glob("*/files/*")) + sorted(FIXTURES.glob("*/report/tensors/*"))
    return [f for f in files if f.is_file()]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random corruption of ``data``."""
    buf = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 or not buf:  # truncate
        return bytes(buf[: rng.randrange(len(buf) + 1)])
    if kind == 1:  # flip a few bits, mostly in the header
        for _ in range(rng.randint(1, 8)):
            limit = len(buf) if rng.random() < 0.3 else min(len(buf), 512)
            buf[rng.randrange(limit)] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if kind == 2:  # an extreme or random value over a size-like field
        width = rng.choice([1, 2, 4, 8])
        pos = rng.randrange(min(len(buf), 600))
        value = rng.choice(EXTREMES) if rng.random() < 0.6 else rng.getrandbits(8 * width)
        order = rng.choice(["little", "big"])
        buf[pos : pos + width] = (value % (1 << (8 * width))).to_bytes(width, order)  # type: ignore[arg-type]
        return bytes(buf)
    if kind == 3:  # garbage run
        pos = rng.randrange(len(buf))
        buf[pos : pos + rng.randint(1, 64)] = rng.randbytes(rng.randint(1, 64))
        return bytes(buf)
    if kind == 4:  # delete or insert bytes
        pos = rng.randrange(len(buf))
        if rng.random() < 0.5:
            del buf[pos : pos + rng.randint(1, 16)]
        else:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        return bytes(buf)
    return bytes(buf) + rng.randbytes(rng.randint(1, 32))  # trailing garbage


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang()


def worker(cases: int, seed: int) -> int:
    """Run the fuzz loop; print each failure; return the number of failures."""
    from reportdb.errors import ReportDBError
    from reportdb.formats import _parse, load_tensor_file

    rng = random.Random(seed)
    files = [(path, path.read_bytes()) for path in fixture_files()]
    signal.signal(signal.SIGALRM, _alarm)
    failures = 0
    done = {"ok": 0, "error": 0}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "case"
        for case in range(cases):
            path, data = files[case % len(files)]
            mutated = mutate(data, rng)
            through_file = path.suffix == ".pt" or case % 10 == 0
            signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
            try:
                if through_file:
                    scratch.write_bytes(mutated)
                    loaded = load_tensor_file(scratch)
                else:
                    loaded = _parse(np.frombuffer(mutated, dtype=np.uint8))
                loaded.array  # assembling may only fail with AssemblyError
                done["ok"] += 1
            except ReportDBError:
                done["error"] += 1
            except BaseException as exc:  # noqa: BLE001 - the point is to catch anything else
                failures += 1
                kind = "hang" if isinstance(exc, _Hang) else type(exc).__name__
                print(f"case {case} ({path.name}): {kind}", file=sys.stderr)
                traceback.print_exc(limit=4)
                if failures > 20:
                    break
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    print(f"{cases} cases: {done['ok']} loaded, {done['error']} rejected, {failures} failures")
    return failures


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_fuzz_mutated_fixtures() -> None:
    assert len(fixture_files()) > 100
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, __file__, str(CASES), str(SEED)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_memory,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, f"fuzz failures:\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"{CASES} cases" in proc.stdout
    print(proc.stdout.strip(), f"in {elapsed:.1f} s")


if __name__ == "__main__":
    sys.exit(1 if worker(int(sys.argv[1]), int(sys.argv[2])) else 0)
