"""Medians per (bench, system) of a JSON-lines result file, with ratios to the
peer, and to the same system of another version (system name + "-base") where
an A/B run measured one."""
import json, statistics, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
groups = defaultdict(lambda: defaultdict(list))
for r in rows:
    for k, v in r.items():
        if isinstance(v, (int, float)) and k not in ("run", "mib", "files"):
            groups[(r["bench"].replace("posix-", ""), r["system"])][k].append(v)
med = {g: {k: statistics.median(v) for k, v in m.items()} for g, m in groups.items()}
peers = {"seq": "fio-direct", "meta": "ext4-loop", "mount": "ext4-loop"}
for (bench, system), m in sorted(med.items()):
    peer = med.get((bench, peers.get(bench)), {})
    parts = []
    for k, v in sorted(m.items()):
        ratio = f" ({v / peer[k]:.2f}x of {peers[bench]})" if k in peer and peer[k] and system != peers[bench] else ""
        base = med.get((bench, system + "-base"), {})
        if k in base and base[k]:
            ratio += f" ({v / base[k]:.2f}x of base)"
        parts.append(f"{k}={v:,.1f}{ratio}")
    print(f"{bench:5} {system:16} " + "  ".join(parts))
print("(fields ending in _s are times: there a ratio above 1 is slower)")
