"""Byte-level fuzz of light binaries: mutate the bytes of every sample and make sure each
mutant either fails cleanly (an MnrtError) or is the same binary as its seed.

Seeds: every `samples/*.mnlb`, rewritten in the current format (JSON and back, which
stamps this mnrt's version and integrity hash; the 1.0 originals predate the hash). Each
mutant gets 1-4 byte mutations (bit flips, random or extreme bytes, u32 words of 0 or
0xffffffff, inserted, deleted or truncated bytes) and goes through what `mnrt run` does:
load, verify, replay with verification. Mutants run in worker processes, each under an
address-space limit (--rss-mib) and a per-mutant alarm (--timeout); a worker that dies or
overruns is counted and replaced.

Printed: mutants tried; clean errors (MnrtError); tracebacks (any other exception, or a
worker that died); hangs (over --timeout); accepted mutants, those whose content differs
from the seed's (commands, header, blob table or blob bytes: must be 0) and those whose
verdict differs (must be 0); the peak RSS of any worker.

    python benchmarks/fuzz_binaries.py [--seconds 600] [--workers 2] [--timeout 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from mnrt.format import FORMAT_VERSION

ROOT = Path(__file__).resolve().parent.parent
BATCH = 200  # mutants a worker runs before it reports


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not out:
            break
        i = rng.randrange(len(out))
        kind = rng.randrange(8)
        if kind == 0:
            out[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[i] = rng.randrange(256)
        elif kind == 2:
            out[i] = rng.choice((0, 0xFF, 0x7F, 0x80))
        elif kind == 3:
            word = rng.choice((0, 0xFFFFFFFF, 0x7FFFFFFF, rng.randrange(1 << 32)))
            out[i : i + 4] = word.to_bytes(4, "little")
        elif kind == 4:
            out[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 5:
            del out[i : i + rng.randint(1, 8)]
        elif kind == 6:
            del out[i:]
        else:
            j = rng.randrange(len(out))
            out[i], out[j] = out[j], out[i]
    return bytes(out)


def _content(binary) -> str:
    """Everything a binary says (header, commands, blob table, blob bytes) but the stamps."""
    from mnrt.format import jsonio

    doc = jsonio.to_json(binary)
    return json.dumps(doc, sort_keys=True)


def _outcome(data: bytes) -> tuple[str, str | None, str | None]:
    """('clean'|'accepted'|'traceback', content if accepted, verdict if accepted)."""
    import mnrt

    try:
        binary = mnrt.LightBinary(data)
        report = mnrt.replay(binary)
        return "accepted", _content(binary), report.verdict.split(" ")[0]
    except mnrt.MnrtError:
        return "clean", None, None


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def worker(seed_dir: Path, seed: int, count: int, timeout: int) -> None:
    """Run `count` mutants; print one JSON line of counts (and examples of failures)."""
    import mnrt  # noqa: F401  (imported before the timing starts)

    seeds = sorted(seed_dir.glob("*.mnlb"))
    base = {}
    for path in seeds:
        data = path.read_bytes()
        kind, content, verdict = _outcome(data)
        assert kind == "accepted", path
        base[path.name] = (data, content, verdict)
    rng = random.Random(seed)
    counts: Counter = Counter()
    examples: list[str] = []
    signal.signal(signal.SIGALRM, _alarm)
    for _ in range(count):
        name = rng.choice(sorted(base))
        data, content, verdict = base[name]
        mutant = _mutate(data, rng)
        signal.alarm(timeout)
        try:
            kind, got, got_verdict = _outcome(mutant)
        except _Hang:
            kind, got, got_verdict = "hang", None, None
        except Exception as e:
            kind, got, got_verdict = "traceback", None, None
            if len(examples) < 5:
                examples.append(f"{name}: {type(e).__name__}: {e}"[:300])
        finally:
            signal.alarm(0)
        counts[kind] += 1
        if kind == "accepted":
            if got != content:
                counts["changed_content"] += 1
                if len(examples) < 5:
                    diff = [i for i, (a, b) in enumerate(zip(mutant, data)) if a != b][:4]
                    examples.append(f"{name}: accepted with changed content at bytes {diff}")
            if got_verdict != verdict:
                counts["changed_verdict"] += 1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"counts": counts, "examples": examples, "rss_kib": rss}), flush=True)


def _make_seeds(folder: Path) -> None:
    from mnrt.format import LightBinary, jsonio

    for path in sorted((ROOT / "samples").glob("*.mnlb")):
        rewritten = jsonio.from_json(jsonio.to_json(LightBinary.load(path)))
        rewritten.save(folder / path.name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=10, help="seconds per mutant")
    parser.add_argument("--rss-mib", type=int, default=2048, help="address space per worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        folder, seed, count, timeout = args.worker
        limit = args.rss_mib << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        worker(Path(folder), int(seed), int(count), int(timeout))
        return
    totals: Counter = Counter()
    examples: list[str] = []
    peak_kib = 0
    with tempfile.TemporaryDirectory() as tmp:
        _make_seeds(Path(tmp))
        seeds = ", ".join(p.name for p in sorted(Path(tmp).iterdir()))
        print(f"seeds: {seeds} (format {'.'.join(map(str, FORMAT_VERSION))})")
        deadline = time.monotonic() + args.seconds
        next_seed = args.seed * 1_000_003
        running: list[tuple[subprocess.Popen, float]] = []
        while running or time.monotonic() < deadline:
            while len(running) < args.workers and time.monotonic() < deadline:
                next_seed += 1
                cmd = [sys.executable, __file__, "--rss-mib", str(args.rss_mib), "--worker"]
                cmd += [tmp, str(next_seed), str(BATCH), str(args.timeout)]
                p = subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
                )
                running.append((p, time.monotonic() + 60 + BATCH * args.timeout))
            time.sleep(0.05)
            for p, limit in list(running):
                if p.poll() is None and time.monotonic() < limit:
                    continue
                running.remove((p, limit))
                if p.poll() is None:  # the worker's own alarms failed it: a hang
                    p.kill()
                    p.wait()
                    totals["hang"] += 1
                    continue
                out, err = p.communicate()
                try:
                    line = json.loads(out.strip().splitlines()[-1])
                except (IndexError, ValueError):
                    totals["traceback"] += 1  # the worker died (memory, a crash)
                    if len(examples) < 5:
                        examples.append(f"worker died ({p.returncode}): {err.strip()[-300:]}")
                    continue
                totals.update(line["counts"])
                examples.extend(line["examples"][: max(0, 5 - len(examples))])
                peak_kib = max(peak_kib, line["rss_kib"])
    peak_kib = max(peak_kib, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    tried = sum(totals[k] for k in ("clean", "accepted", "traceback", "hang"))
    print(f"mutants tried:              {tried} in {args.seconds:.0f} s, {args.workers} workers")
    print(f"clean errors (MnrtError):   {totals['clean']}")
    print(f"tracebacks:                 {totals['traceback']}   (must be 0)")
    print(f"hangs (> {args.timeout} s):            {totals['hang']}   (must be 0)")
    print(f"accepted:                   {totals['accepted']}")
    print(f"  changed content/commands: {totals['changed_content']}   (must be 0)")
    print(f"  changed verdict:          {totals['changed_verdict']}   (must be 0)")
    print(f"peak RSS of a worker:       {peak_kib / 1024:.0f} MiB (limit {args.rss_mib} MiB AS)")
    for e in examples:
        print("  example:", e)
    bad = totals["traceback"] + totals["hang"] + totals["changed_content"]
    sys.exit(1 if bad + totals["changed_verdict"] else 0)


if __name__ == "__main__":
    os.environ.setdefault("MNRT_THREADS", "1")
    main()
