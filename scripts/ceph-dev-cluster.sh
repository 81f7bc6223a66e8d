#!/usr/bin/env bash
# A throw-away one-node Ceph cluster on loopback, for the `rados` device
# kind's tests and for trying rados devices by hand.
#
#   scripts/ceph-dev-cluster.sh start DIR [POOL...]   prints DIR/ceph.conf
#   scripts/ceph-dev-cluster.sh stop DIR
#   scripts/ceph-dev-cluster.sh status DIR
#   scripts/ceph-dev-cluster.sh pause|resume DIR
#
# `start` runs one monitor (mon.a) and one OSD (osd.0) from DIR, both on
# 127.0.0.1 only, with no authentication (auth_*_required = none) and pools of
# one copy (osd_pool_default_size = 1, min_size 1). The OSD keeps objects in
# memory (memstore, CEPH_DEV_OSD_BYTES bytes, 2 GiB unless set), so the
# cluster starts in a few seconds and stopping it loses every object. The
# store keeps an object as a list of buffers (memstore's default), where a
# small write into a large object costs in proportion to the pieces earlier
# writes left; CEPH_DEV_PAGE_SET=true keeps it in 64 KiB pages instead. No
# manager daemon runs unless CEPH_DEV_MGR=1: nothing Hurricane or `rados`
# does needs one (`ceph -s` then reports "no active mgr" and no
# placement-group statistics), but the monitor learns how much a pool holds
# only from a manager, so pool quotas (`ceph osd pool set-quota`) are
# enforced only with one (ceph-mgr; it reports every second here, and
# `start` returns once it is active). Pools are not resized by the
# manager's autoscaler. It
# creates the pool `hurricane` and any POOLs named, each with 8 placement
# groups, and returns once a write to each succeeds. The monitor listens on a
# free port chosen at the first start (CEPH_DEV_PORT to choose it).
#
# `start` on a DIR whose cluster runs only creates the POOLs it lacks and
# prints the config again; a DIR left by a cluster that no longer runs (its
# daemons killed, the host restarted) is wiped and started afresh. Starts and
# stops on one DIR take a lock on DIR.lock, so concurrent test processes may
# all call `start`. `stop` kills the daemons started from DIR (by their pid
# files, checked against their command lines; SIGKILL, as nothing in them is
# kept), waits for them to exit, and removes DIR.
#
# `pause` stops the OSD where it stands (SIGSTOP) and `resume` lets it go on
# (SIGCONT): a stalled OSD, which clients see as operations that do not
# complete, for the tests of timeouts. (A memstore OSD killed and restarted
# would come back empty.) Keep a pause under about 40 s: see
# osd_heartbeat_grace below.
#
# The daemons come from Debian's ceph-mon, ceph-osd and ceph-common
# (`HURRICANE_CEPH=1 scripts/setup.sh` installs them); they run as the
# calling user, without systemd, their logs in DIR/log.
#
# Try it:
#   conf=$(scripts/ceph-dev-cluster.sh start /tmp/ceph)
#   ceph -c "$conf" -s
#   rados -c "$conf" -p hurricane bench 5 write --no-cleanup
#   rados -c "$conf" -p hurricane bench 5 seq
#   scripts/ceph-dev-cluster.sh stop /tmp/ceph
set -euo pipefail

usage() {
    echo "usage: $0 start|stop|status|pause|resume DIR [POOL...]" >&2
    exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
shift 2
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
dir=${dir%/}
conf="$dir/ceph.conf"
pools=(hurricane "$@")

tools=(ceph-mon ceph-osd monmaptool ceph rados)
[ "${CEPH_DEV_MGR:-0}" != 1 ] || tools+=(ceph-mgr)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || {
        echo "$0: $tool not found: install ceph-mon, ceph-osd and ceph-common (HURRICANE_CEPH=1 scripts/setup.sh)" >&2
        exit 1
    }
done

# One start or stop at a time per DIR.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9

# The pid of daemon NAME (mon.a, osd.0) if it runs from this DIR.
daemon_pid() {
    local f="$dir/run/$1.pid" pid
    [ -s "$f" ] || return 1
    pid=$(cat "$f")
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- " -c $conf " || return 1
    echo "$pid"
}

ceph_() { timeout "${CEPH_DEV_TIMEOUT:-30}" ceph -c "$conf" --connect-timeout 10 "$@"; }

# Whether process PID is gone (a zombie counts as gone: it holds nothing).
exited() {
    local state
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 0
    [ -z "$state" ] || [ "$state" = Z ] || [ "$state" = X ]
}

# The cluster is thrown away, so its daemons are killed outright (a memstore
# OSD told to stop would first save every object to DIR).
kill_daemons() {
    local pids=() p name
    for name in mgr.x osd.0 mon.a; do
        p=$(daemon_pid "$name") && pids+=("$p")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -KILL "${pids[@]}" 2>/dev/null || true
    for p in "${pids[@]}"; do
        for _ in $(seq 200); do
            exited "$p" && break
            sleep 0.05
        done
        exited "$p" || {
            echo "$0: process $p did not exit" >&2
            exit 1
        }
    done
}

# Creates the pools that do not exist yet and waits until each takes a write.
ensure_pools() {
    local pool have
    have=$(ceph_ osd pool ls)
    for pool in "${pools[@]}"; do
        if ! grep -qx -- "$pool" <<<"$have"; then
            ceph_ osd pool create "$pool" 8 8 >/dev/null 2>&1 || {
                ceph_ osd pool ls | grep -qx -- "$pool" || {
                    echo "$0: could not create pool $pool" >&2
                    exit 1
                }
            }
            ceph_ osd pool application enable "$pool" hurricane >/dev/null 2>&1 || true
        fi
        # Blocks until the pool's placement groups are active.
        echo ready | timeout "${CEPH_DEV_TIMEOUT:-30}" rados -c "$conf" -p "$pool" put .ceph-dev-ready - || {
            echo "$0: pool $pool takes no writes; see $dir/log" >&2
            exit 1
        }
    done
}

free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    if daemon_pid mon.a >/dev/null && daemon_pid osd.0 >/dev/null; then
        ensure_pools
        echo "$conf"
        return
    fi
    # Whatever is left of a cluster that no longer runs.
    kill_daemons
    rm -rf "$dir"
    mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/osd.0"
    # A start that fails leaves no daemon behind (DIR stays, for its logs).
    trap 'rc=$?; [ $rc -eq 0 ] || kill_daemons; exit $rc' EXIT
    local port=${CEPH_DEV_PORT:-$(free_port)}
    local fsid
    fsid=$(uuidgen)
    cat >"$conf" <<EOF
# A one-node development cluster made by scripts/ceph-dev-cluster.sh.
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$port
public_addr = 127.0.0.1
public_network = 127.0.0.0/8
ms_bind_ipv6 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
osd_pool_default_pg_autoscale_mode = off
mgr_stats_period = 1
mon_mgr_digest_period = 1
# A placement group serves reads only while its read lease lasts
# (osd_pool_default_read_lease_ratio x osd_heartbeat_grace, 16 s by
# default); an OSD stopped for longer (by pause) comes back with its leases
# lapsed, and with no peer to renew them its placement groups may stay
# "laggy", serving nothing, for minutes. A longer grace (a 48 s lease) lets
# the tests stall the OSD for half a minute. One OSD has no peers to mark it
# down, so nothing else changes.
osd_heartbeat_grace = 60
run_dir = $dir/run
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$name.\$pid.asok
log_file = $dir/log/\$name.log
crash_dir = $dir/log
keyring = /dev/null

[mon]
mon_data = $dir/\$name

[osd]
osd_data = $dir/\$name
osd_objectstore = memstore
memstore_device_bytes = ${CEPH_DEV_OSD_BYTES:-2147483648}
memstore_page_set = ${CEPH_DEV_PAGE_SET:-false}
osd_crush_initial_weight = 1
osd_class_update_on_start = false

[mgr]
mgr_data = $dir/\$name
EOF
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
    ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mon.a.mkfs" 2>&1 || {
        cat "$dir/log/mon.a.mkfs" >&2
        exit 1
    }
    ceph-mon -c "$conf" -i a </dev/null >>"$dir/log/mon.a.stderr" 2>&1 9>&-
    local uuid id
    uuid=$(uuidgen)
    id=$(ceph_ osd new "$uuid")
    [ "$id" = 0 ] || {
        echo "$0: the monitor gave the OSD id $id, not 0" >&2
        exit 1
    }
    ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$uuid" >"$dir/log/osd.0.mkfs" 2>&1 || {
        cat "$dir/log/osd.0.mkfs" >&2
        exit 1
    }
    ceph-osd -c "$conf" -i 0 </dev/null >>"$dir/log/osd.0.stderr" 2>&1 9>&-
    [ "${CEPH_DEV_MGR:-0}" != 1 ] || start_mgr
    ensure_pools
    echo "$conf"
}

# A manager (mgr.x), and a wait until the monitor names it active.
start_mgr() {
    mkdir -p "$dir/mgr.x"
    ceph-mgr -c "$conf" -i x </dev/null >>"$dir/log/mgr.x.stderr" 2>&1 9>&-
    for _ in $(seq 300); do
        ceph_ -s 2>/dev/null | grep -q 'mgr: x(active' && return
        sleep 0.1
    done
    echo "$0: the manager did not become active; see $dir/log" >&2
    exit 1
}

case "$cmd" in
start) start ;;
stop)
    kill_daemons
    rm -rf "$dir"
    rm -f "$dir.lock"
    ;;
pause | resume)
    p=$(daemon_pid osd.0) || {
        echo "$0: no OSD runs from $dir" >&2
        exit 1
    }
    if [ "$cmd" = pause ]; then kill -STOP "$p"; else kill -CONT "$p"; fi
    ;;
status)
    daemon_pid mon.a >/dev/null && daemon_pid osd.0 >/dev/null || {
        echo "not running"
        exit 1
    }
    ceph_ -s
    ;;
*) usage ;;
esac
