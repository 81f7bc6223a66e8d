#!/usr/bin/env bash
# Packs what run.sh needs on a machine without Ceph or network: the Ceph
# daemons, `rados`, fio, this build of `hurricane` (--features rados; HURRICANE
# names another), bench/rados-overwrite.c built, the libraries they load that
# a stock distribution lacks, Ceph's plugin directories, and a stand-in for
# the `ceph` CLI (ceph-standin.sh over cephcmd.c, a monitor command through
# librados: the CLI is Python built for the host's own interpreter). Writes
# OUT (default cephdev.tar.xz).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); out=${1:-$PWD/cephdev.tar.xz}
hc=${HURRICANE:-${CARGO_TARGET_DIR:-target}/release/hurricane}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/bin" "$w/lib" "$w/plugins"
cp /usr/bin/ceph-mon /usr/bin/ceph-osd /usr/bin/monmaptool /usr/bin/rados /usr/bin/fio "$w/bin/"
strip -o "$w/bin/hurricane" "$hc"
gcc -O2 -o "$w/bin/cephcmd" "$here/cephcmd.c" -lrados
gcc -O2 -o "$w/bin/rados-overwrite" "$here/../../../rados-overwrite.c" -lrados
cp "$here/ceph-standin.sh" "$w/bin/ceph"
cp -a /usr/lib/x86_64-linux-gnu/ceph "$w/plugins/ceph"
cp -a /usr/lib/x86_64-linux-gnu/rados-classes "$w/plugins/rados-classes"
{ ldd "$w"/bin/* "$w"/plugins/ceph/*.so* "$w"/plugins/ceph/*/*.so "$w"/plugins/rados-classes/*.so 2>/dev/null || true; } |
    awk '/=>/ {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|libresolv|libutil)\.so|ld-linux|/ceph/libceph-common' |
    while read -r l; do cp -L "$l" "$w/lib/"; done
tar -C "$w" -cf - bin lib plugins | xz -T0 -9 > "$out"
ls -l "$out"
