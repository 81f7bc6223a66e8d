#!/usr/bin/env bash
# Online re-layout through the mount, over 4 image files on the same disk,
# in the same run: a file of MIB MiB on one device (extent@0) moved to a
# stripe over all four by `hurricane migrate`, against `cp` of the same file
# into a directory whose default layout is that stripe (then sync); and the
# foreground read bandwidth of the file (fio, 1 MiB sequential reads, page
# cache dropped) alone and while it migrates (the copy held to RATE, by
# default MIB/4 MiB/s, so that it lasts the whole read). Each round alternates the
# order of the two copies; the file goes back to extent@0 between rounds.
#   bench/migrate.sh [MIB] [RUNS]     (defaults 1024 5)
# Results: bench/results/migrate.jsonl (RESULTS=DIR for another place),
# medians and ratios on stdout. BENCH_DIR=DIR holds the images.
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-1024}; runs=${2:-5}
# The copy's rate while the foreground read runs: slow enough to last it.
rate=${RATE:-$((mib / 4))M}
work=${BENCH_DIR:-$PWD/target/bench-migrate}
res=${RESULTS:-bench/results}
out=$res/migrate.jsonl
mkdir -p "$res" "$work"; : > "$out"
command -v fio >/dev/null || { echo "needs fio (scripts/setup.sh installs it)" >&2; exit 1; }
cargo build --release --locked -p hurricane-cli >/dev/null 2>&1
hc=$PWD/target/release/hurricane
pool=$work/pool mnt=$work/mnt
stripe='stripe(unit=1M)[extent@0,extent@1,extent@2,extent@3]'
mkdir -p "$mnt"
cleanup() { "$hc" umount "$mnt" 2>/dev/null || true; }
trap cleanup EXIT

now() { date +%s.%N; }
since() { python3 -c "import sys;print(round($(now)-$1,3))"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
record() { # what run seconds [mib_per_s]
    python3 - "$@" "$mib" >> "$out" <<'PY'
import json, sys
what, run, t, rate, mib = sys.argv[1:]
print(json.dumps({"bench": "migrate", "what": what, "run": int(run), "seconds": float(t),
  "mib_per_s": float(rate) if rate != "-" else round(int(mib) / float(t), 1), "file_mib": int(mib)}))
PY
}
read_bw() { # file -> MiB/s of a sequential read
    fio --name=r --filename="$1" --rw=read --bs=1M --ioengine=psync --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw"]/1024,1))'
}

rm -rf "$pool"
"$hc" mkfs "$pool" --devices 4 --device-size "$((mib * 3 + 512))M" >/dev/null
"$hc" mount "$pool" "$mnt"
mkdir "$mnt/striped"
setfattr -n user.hurricane.dir_layout -v "$stripe" "$mnt/striped"
touch "$mnt/f"; setfattr -n user.hurricane.layout -v 'extent@0' "$mnt/f"
fio --name=w --filename="$mnt/f" --rw=write --bs=1M --size="${mib}M" --ioengine=psync --end_fsync=1 \
    --output-format=terse >/dev/null

for run in $(seq 1 "$runs"); do
    for step in $( ((run % 2)) && echo "cp migrate" || echo "migrate cp"); do
        drop
        t0=$(now)
        if [ "$step" = cp ]; then
            cp "$mnt/f" "$mnt/striped/g"; sync "$mnt/striped/g"
        else
            "$hc" migrate "$mnt/f" --layout "$stripe" >/dev/null
        fi
        record "$step" "$run" "$(since "$t0")" -
        if [ "$step" = cp ]; then rm "$mnt/striped/g"; else "$hc" migrate "$mnt/f" --layout extent@0 >/dev/null; fi
    done
    # Foreground reads of the file: alone, then while it moves to the
    # stripe (the copy held to RATE so that it lasts the whole read).
    drop
    record read-alone "$run" 0 "$(read_bw "$mnt/f")"
    drop
    "$hc" migrate "$mnt/f" --layout "$stripe" --rate "$rate" >/dev/null &
    mover=$!
    sleep 0.3
    record read-while-migrating "$run" 0 "$(read_bw "$mnt/f")"
    wait "$mover"
    "$hc" migrate "$mnt/f" --layout extent@0 >/dev/null
done
"$hc" umount "$mnt"
"$hc" fsck "$pool" >/dev/null
rm -rf "$pool"

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda w: statistics.median(r["mib_per_s"] for r in rows if r["what"] == w)
m, c, a, d = med("migrate"), med("cp"), med("read-alone"), med("read-while-migrating")
print(f"medians of {len([r for r in rows if r['what'] == 'migrate'])} runs, file of {rows[0]['file_mib']} MiB")
print(f"migrate extent@0 -> stripe x4: {m:.1f} MiB/s   cp to the stripe: {c:.1f} MiB/s   ratio {m / c:.2f}")
print(f"sequential read of the file: {a:.1f} MiB/s alone, {d:.1f} MiB/s while it migrates ({d / a:.2f})")
PY
