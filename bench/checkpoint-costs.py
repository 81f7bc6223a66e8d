#!/usr/bin/env python3
"""Checkpoint cost per changed inode, phase by phase, from a meta-scale log.

The committer logs every commit at debug level ("commit of epoch N:
checkpoint (changes held A ms, written in B ms, C inodes changed)"). Run
one system of the experiment with that logging on:

    RUST_LOG=hurricane::fs=debug HURRICANE_META_SCALE_RUN=native:one-dir:10000000:10000 \
        hurricane bench meta-scale --files 10000000 --out DIR > LOG 2>&1
    bench/checkpoint-costs.py LOG

Each point of the experiment ends a phase: its creates, then the sampled
stats, lookups and unlinks, the unlinked files made again, and a
checkpoint. The last two checkpoints of a phase carry the random changes,
so they are left out: what is printed is the median of (held + written)
per changed inode over the create phase's own checkpoints, and the time
the committer was busy over the phase's span.
"""
import datetime
import re
import statistics
import sys

COMMIT = re.compile(
    r"^(\S+)Z\s+DEBUG commit of epoch (\d+): (\w+) \(changes held ([\d.]+) ms, "
    r"written in ([\d.]+) ms, (\d+) inodes"
)
POINT = re.compile(r"^\s*files (\d+), create/s (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def main(path):
    phases, commits = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = ANSI.sub("", line)
            m = COMMIT.search(line)
            if m:
                t = datetime.datetime.fromisoformat(m[1]).timestamp()
                commits.append((t, float(m[4]) / 1e3, float(m[5]) / 1e3, int(m[6])))
                continue
            m = POINT.search(line)
            if m:
                phases.append((int(m[1]), int(m[2]), commits))
                commits = []
    print("files       create/s  checkpoints  us/inode (median)  committer busy")
    for files, rate, cs in phases:
        # Checkpoints of a create phase's writer, not the odd small commit.
        big = [c for c in cs if c[3] > 1000]
        own = big[:-2] if len(big) > 3 else big
        if not own:
            continue
        per = statistics.median(1e6 * (c[1] + c[2]) / c[3] for c in own)
        start = own[0][0] - own[0][1] - own[0][2]
        span = max(own[-1][0] - start, 1e-9)
        busy = sum(c[1] + c[2] for c in own)
        print(f"{files:>10,}  {rate:>8,}  {len(own):>11}  {per:>17.2f}  {100 * busy / span:>13.0f}%")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: checkpoint-costs.py LOG")
    main(sys.argv[1])
