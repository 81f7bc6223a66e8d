#!/usr/bin/env python3
"""HFS access pattern A from Python: a NumPy array written to a ``regions``
layout and read back by N threads, each its own region, beside the same
reads from Rust threads (``hurricane.read_regions``, same pool, same file,
same instance) and from Python threads on a plain file on ext4 (a loop
device, as root).

    python bench/pattern_a.py --size 1G --threads 1,2,4 --repeat 5

Each thread reads its 1/N of the file in ``--chunk`` reads: from Python
with ``File.readinto`` into its slice of one NumPy array (per-thread
cursors, GIL released), from Rust the same reads into a buffer of its own,
on ext4 with ``os.preadv`` into the same slices. Before every pass the
pool's caches are emptied; with ``--cold`` the kernel's page cache too
(``echo 3 > /proc/sys/vm/drop_caches``), so the image files and the ext4
file are read from the disk. Prints medians and ratios, writes JSON
(``--json``) and, where matplotlib is installed, a plot (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

import hurricane


def size_arg(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def drop_kernel_cache() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def threaded(n: int, work) -> float:
    """Runs work(i) on n threads released together; returns the seconds
    from the release to the last one's end."""
    barrier = threading.Barrier(n + 1)
    errors = []

    def run(i):
        barrier.wait()
        try:
            work(i)
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def python_pass(f: hurricane.File, out: np.ndarray, n: int, chunk: int) -> float:
    flat = out.reshape(-1).view(np.uint8)
    region = flat.size // n

    def read(i):
        start = i * region
        f.seek(start)  # this thread's own cursor
        pos = start
        while pos < start + region:
            got = f.readinto(flat[pos : min(pos + chunk, start + region)])
            if got == 0:
                raise EOFError(f"thread {i}: end of file at {pos}")
            pos += got

    return threaded(n, read)


def rust_pass(f: hurricane.File, out: np.ndarray, n: int, chunk: int, size: int) -> float:
    t0 = time.perf_counter()
    got = hurricane.read_regions(f, n, chunk, out)
    dt = time.perf_counter() - t0
    if got != size:
        raise RuntimeError(f"read_regions read {got} of {size} bytes")
    return dt


def ext4_pass(path: str, out: np.ndarray, n: int, chunk: int) -> float:
    flat = out.reshape(-1).view(np.uint8)
    region = flat.size // n
    fds = [os.open(path, os.O_RDONLY) for _ in range(n)]

    def read(i):
        start, pos = i * region, i * region
        while pos < start + region:
            got = os.preadv(fds[i], [flat[pos : min(pos + chunk, start + region)]], pos)
            if got == 0:
                raise EOFError(f"thread {i}: end of file at {pos}")
            pos += got

    try:
        return threaded(n, read)
    finally:
        for fd in fds:
            os.close(fd)


class Ext4:
    """ext4 on a loop device over an image file in ``root``."""

    def __init__(self, root: str, size: int):
        self.img = os.path.join(root, "ext4.img")
        self.mnt = os.path.join(root, "ext4")
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.img, "wb") as f:
            f.truncate(size)
        self.dev = subprocess.check_output(["losetup", "-f", "--show", self.img], text=True).strip()
        subprocess.check_call(["mkfs.ext4", "-q", "-F", self.dev])
        subprocess.check_call(["mount", self.dev, self.mnt])

    def close(self):
        subprocess.call(["umount", self.mnt])
        subprocess.call(["losetup", "-d", self.dev])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/var/tmp/hurricane-pattern-a", help="where the pool and ext4 images go")
    ap.add_argument("--devices", type=int, default=4, help="devices in the pool, one region each (default 4)")
    ap.add_argument("--size", default="512M", help="bytes in the array (default 512M)")
    ap.add_argument("--threads", default="1,2,4", help="thread counts (default 1,2,4)")
    ap.add_argument("--chunk", default="1M", help="bytes per read (default 1M)")
    ap.add_argument("--repeat", type=int, default=5, help="passes of each (default 5; medians reported)")
    ap.add_argument("--spec", default="cursor=per-thread", help="open spec of the instance (default cursor=per-thread)")
    ap.add_argument("--cold", action="store_true", help="empty the kernel's page cache before each pass (root)")
    ap.add_argument("--no-ext4", action="store_true", help="skip the ext4 peer")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plot", help="write a plot here (PNG; needs matplotlib)")
    args = ap.parse_args()

    size, chunk = size_arg(args.size), size_arg(args.chunk)
    counts = [int(t) for t in args.threads.split(",")]
    devices = args.devices
    size -= size % (devices * 8 * max(counts) * 4096)
    root = args.dir
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ext4 = None
    if not args.no_ext4:
        if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
            print("ext4 peer skipped: needs root and mkfs.ext4", file=sys.stderr)
        else:
            ext4 = Ext4(root, size + (size >> 3) + (64 << 20))
    if args.cold and os.geteuid() != 0:
        ap.error("--cold needs root")

    src = np.random.default_rng(1).random(size // 8)  # float64
    out = np.empty_like(src)
    dev_size = size // devices + (size >> 4) + (128 << 20)
    hurricane.Pool.mkfs(os.path.join(root, "pool"), devices=devices, size=dev_size)
    results = {"size": size, "chunk": chunk, "devices": devices, "cold": args.cold, "cpus": os.cpu_count(), "rows": []}
    with hurricane.Pool.open(os.path.join(root, "pool")) as pool:
        layout = f"regions(size={size // devices // 1024}K,width={devices})"
        t0 = time.perf_counter()
        with pool.create("/array.f64", layout=layout) as f:
            f.write(src)
            f.sync()
        results["write_gbs"] = size / (time.perf_counter() - t0) / 1e9
        results["layout"] = pool.layout("/array.f64")
        if ext4:
            path = os.path.join(ext4.mnt, "array.f64")
            src.tofile(path)
            os.sync()
        f = pool.open("/array.f64", spec=args.spec)
        results["spec"] = f.spec
        # Correctness first: the array read back by the threads is the one written.
        python_pass(f, out, max(counts), chunk)
        if not np.array_equal(out, src):
            raise SystemExit("the array read back differs from the one written")
        try:
            for n in counts:
                times = {"python": [], "rust": [], "ext4": []}
                for r in range(args.repeat):
                    order = ["python", "rust", "ext4"] if r % 2 == 0 else ["ext4", "rust", "python"]
                    for system in order:
                        if system == "ext4" and not ext4:
                            continue
                        pool.drop_caches()
                        if args.cold:
                            drop_kernel_cache()
                        if system == "python":
                            times[system].append(python_pass(f, out, n, chunk))
                        elif system == "rust":
                            times[system].append(rust_pass(f, out, n, chunk, size))
                        else:
                            times[system].append(ext4_pass(path, out, n, chunk))
                row = {"threads": n}
                for system, ts in times.items():
                    if ts:
                        row[system + "_gbs"] = size / statistics.median(ts) / 1e9
                        row[system + "_runs"] = [size / t / 1e9 for t in ts]
                row["python_over_rust"] = row["python_gbs"] / row["rust_gbs"]
                if ext4:
                    row["python_over_ext4"] = row["python_gbs"] / row["ext4_gbs"]
                results["rows"].append(row)
                line = (
                    f"threads {n}: Python {row['python_gbs']:.2f} GB/s, Rust {row['rust_gbs']:.2f} GB/s "
                    f"(Python/Rust {row['python_over_rust']:.2f})"
                )
                if ext4:
                    line += f", ext4 from Python {row['ext4_gbs']:.2f} GB/s (Hurricane/ext4 {row['python_over_ext4']:.2f})"
                print(line, flush=True)
        finally:
            f.close()
    if ext4:
        ext4.close()
    shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    if args.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("plot skipped: matplotlib is not installed", file=sys.stderr)
        else:
            xs = [r["threads"] for r in results["rows"]]
            fig, ax = plt.subplots(figsize=(6, 4))
            for key, label in (("python_gbs", "Hurricane, Python threads"), ("rust_gbs", "Hurricane, Rust threads"),
                               ("ext4_gbs", "ext4, Python threads")):
                if all(key in r for r in results["rows"]):
                    ax.plot(xs, [r[key] for r in results["rows"]], marker="o", label=label)
            ax.set_xlabel("threads (each reads its own region)")
            ax.set_ylabel("GB/s (median)")
            ax.set_title(f"Pattern A, {size >> 20} MiB array, {'cold' if args.cold else 'page-cached'} devices")
            ax.set_xticks(xs)
            ax.set_ylim(bottom=0)
            ax.legend()
            fig.tight_layout()
            fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
