"""A random fault campaign against the resilient runtime, longer than the CI tests.

Each trial trains examples/train_tiny.py (the real script, a fresh interpreter each start) in a
new directory and, until the run finishes, draws a fault for every start: SIGKILL, SIGTERM,
SIGUSR1 or SIGINT at a random moment (start-up included), damage to a random file of the newest
checkpoint (truncate, zero, delete, flip a byte), a second trainer on the same directory, or, with
--torchrun, a signal to a 2-rank torchrun agent (TERM, USR1, KILL). A trial passes when the run
ends with the checksum of an uninterrupted run, no start crashed with a traceback, no start but
the second trainer exited 2, and no worker outlived its agent.

Run: .venv/bin/python benchmarks/fault_campaign.py [--trials 20] [--seed 0] [--torchrun]
(exits 1 on any failure; prints one line per trial and a tally)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_tiny.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))
STEPS = 200


def command(ckpt: Path, torchrun: bool) -> list[str]:
    args = [str(EXAMPLE), "--steps", str(STEPS), "--checkpoint-dir", str(ckpt), "--checkpoint-every", "5", "--quiet"]
    if torchrun:
        return [TORCHRUN, "--nproc-per-node", "2", "--standalone", *args]
    return [sys.executable, *args]


def start(ckpt: Path, torchrun: bool, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command(ckpt, torchrun), stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def newest(ckpt: Path) -> Path | None:
    done = sorted(p.parent for p in ckpt.glob("step-*/COMPLETE"))
    return done[-1] if done else None


def damage(ckpt: Path, rng: random.Random) -> str:
    d = newest(ckpt)
    if d is None:
        return "damage: no checkpoint yet"
    f = rng.choice(sorted(p for p in d.iterdir() if p.is_file()))
    how = rng.choice(["truncate", "zero", "delete", "flip"])
    data = f.read_bytes()
    if how == "truncate":
        f.write_bytes(data[: len(data) // 2])
    elif how == "zero":
        f.write_bytes(bytes(len(data)))
    elif how == "delete":
        f.unlink()
    else:
        b = bytearray(data)
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(b))
    return f"damage: {how} {d.name}/{f.name}"


def workers(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def checksum(log: Path) -> str | None:
    lines = [line for line in log.read_text().splitlines() if line.startswith("final_checksum=")]
    return lines[-1] if lines else None


def trial(rng: random.Random, reference: str, torchrun: bool, work: Path) -> tuple[bool, list[str]]:
    ckpt, log = work / "ckpt", work / "log"
    events, problems = [], []
    for _attempt in range(40):
        fault = rng.choice(
            ["kill", "term", "usr1", "int", "damage", "second", "none"]
            if not torchrun
            else ["agent-term", "agent-usr1", "agent-kill", "damage", "none"]
        )
        if fault == "damage":
            events.append(damage(ckpt, rng))
            fault = "none"
        p = start(ckpt, torchrun, log)
        kids: list[int] = []
        if fault == "second":
            time.sleep(rng.uniform(1.0, 4.0))
            second = subprocess.run(command(ckpt, torchrun), capture_output=True, text=True, timeout=300)
            if p.poll() is None and second.returncode != 2:
                problems.append(f"second trainer exited {second.returncode}, not 2")
            events.append(f"second trainer: {second.returncode}")
        elif fault != "none":
            time.sleep(rng.uniform(0.2, 8.0))  # start-up (torch's import) included
            kids = workers(p.pid)
            sig = {
                "kill": signal.SIGKILL,
                "term": signal.SIGTERM,
                "usr1": signal.SIGUSR1,
                "int": signal.SIGINT,
                "agent-term": signal.SIGTERM,
                "agent-usr1": signal.SIGUSR1,
                "agent-kill": signal.SIGKILL,
            }[fault]
            if p.poll() is None:
                os.kill(p.pid, sig)
        try:
            code = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            problems.append("a start hung")
            break
        t0 = time.monotonic()
        while any(alive(k) for k in kids) and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        if any(alive(k) for k in kids):
            problems.append(f"workers outlived the agent after {fault}")
        text = log.read_text()
        if "Traceback" in text and not torchrun:  # torchrun's agent prints its own on a signal
            problems.append(f"traceback after {fault}: {text[-600:]}")
        if code == 2:
            problems.append(f"start refused after {fault}: {text.strip().splitlines()[-1:]}")
        events.append(f"{fault}: {code}")
        if code == 0:
            got = checksum(log)
            if got != reference:
                problems.append(f"checksum {got} != {reference}")
            return not problems, events + problems
        if problems:
            break
    else:
        problems.append("never finished")
    return False, events + problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torchrun", action="store_true")
    args = ap.parse_args()
    if args.torchrun and TORCHRUN is None:
        print("torchrun is not installed")
        return 1
    rng = random.Random(args.seed)
    tally: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir = Path(tmp) / "ref"
        ref_dir.mkdir()
        p = start(ref_dir / "ckpt", args.torchrun, ref_dir / "log")
        assert p.wait() == 0, (ref_dir / "log").read_text()[-2000:]
        reference = checksum(ref_dir / "log")
        failures = 0
        for i in range(args.trials):
            work = Path(tmp) / f"t{i}"
            work.mkdir()
            ok, events = trial(rng, reference, args.torchrun, work)
            failures += not ok
            for e in events:
                tally[e.split(":")[0]] += 1
            print(f"trial {i}: {'ok' if ok else 'FAILED'}: {'; '.join(events)}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"trials": args.trials, "failures": failures, "faults": dict(tally)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
