#!/usr/bin/env bash
# Installs what building and testing Hurricane needs on a fresh Debian
# machine: FUSE 3 for mounting, and the tools the tests run on the mount.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v fio >/dev/null || need+=(fio)
command -v sqlite3 >/dev/null || need+=(sqlite3)
# The TPC-B experiment links SQLite, its peer, from the system library.
[ -e /usr/include/sqlite3.h ] || need+=(libsqlite3-dev)
command -v rsync >/dev/null || need+=(rsync)
command -v git >/dev/null || need+=(git)
command -v setfattr >/dev/null || need+=(attr)
# POSIX ACLs through the mount are tested with setfacl/getfacl.
command -v setfacl >/dev/null || need+=(acl)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
# btrfs RAID profiles are the peers of the redundancy benchmarks.
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
# ext4 and XFS on loop devices are the peers of the meta-data benchmarks.
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
# The POSIX conformance suite (vendor/pjdfstest) is C, driven by Perl's prove.
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v prove >/dev/null || need+=(perl)
# The Python binding's tests run in a virtual environment of their own.
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv python3-pip)
# The rados device kind (cargo feature `rados`) links librados, and its tests
# run a one-node Ceph cluster (scripts/ceph-dev-cluster.sh): only with
# HURRICANE_CEPH=1 (99 packages, about 65 MB to download, 240 MB installed;
# ceph-mgr, for the test of pool quotas, which only a manager lets the
# monitor enforce, is 35 of them, mostly Python). They are installed
# without their recommendations, which would replace fuse3 with fuse 2.
ceph=()
if [ "${HURRICANE_CEPH:-0}" = 1 ]; then
    command -v ceph-mon >/dev/null || ceph+=(ceph-mon)
    command -v ceph-osd >/dev/null || ceph+=(ceph-osd)
    command -v ceph-mgr >/dev/null || ceph+=(ceph-mgr)
    command -v rados >/dev/null || ceph+=(ceph-common)
    [ -e /usr/include/rados/librados.h ] || ceph+=(librados-dev)
    command -v uuidgen >/dev/null || ceph+=(uuid-runtime)
fi
if [ ${#need[@]} -gt 0 ] || [ ${#ceph[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: please install: ${need[*]} ${ceph[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    [ ${#need[@]} -eq 0 ] || apt-get install -y -qq "${need[@]}" >/dev/null
    [ ${#ceph[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${ceph[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "setup: cargo (Rust) is required: https://rustup.rs" >&2; exit 1; }
# rust-toolchain.toml names an exact release; where rustup lacks it under that
# name but its stable toolchain is that release, use it (no download).
pin=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$(dirname "$0")/../rust-toolchain.toml")
if command -v rustup >/dev/null && [ -n "$pin" ] && ! (cd / && rustup toolchain list) | grep -q "^$pin-"; then
    stable=$( (cd / && rustup run stable rustc --version) 2>/dev/null | awk '{print $2}')
    if [ "$stable" = "$pin" ]; then
        # `rustup toolchain link` refuses release-like names: name the
        # stable toolchain's directory as that release too.
        host=$( (cd / && rustup run stable rustc -vV) | sed -n 's/^host: //p')
        ln -s "$(cd / && rustup run stable rustc --print sysroot)" "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$pin-$host"
    else
        echo "setup: Rust $pin is required (rust-toolchain.toml): rustup toolchain install $pin" >&2
        exit 1
    fi
fi
# mount -t fuse.hurricane and /etc/fstab find the helper by this name.
if [ "$(id -u)" -eq 0 ] && [ -n "${HURRICANE_BIN:-}" ]; then
    ln -sf "$HURRICANE_BIN" /sbin/mount.fuse.hurricane
fi
