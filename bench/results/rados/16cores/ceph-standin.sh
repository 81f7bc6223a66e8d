#!/usr/bin/env bash
# A stand-in for the ceph CLI: the monitor commands scripts/ceph-dev-cluster.sh uses.
conf=/etc/ceph/ceph.conf; args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -c) conf=$2; shift 2;;
    --connect-timeout) shift 2;;
    *) args+=("$1"); shift;;
  esac
done
set -- "${args[@]}"
d="$(dirname "$0")/cephcmd"
case "$*" in
  "-s"|"status") exec "$d" "$conf" '{"prefix":"status"}';;
  "osd pool ls") exec "$d" "$conf" '{"prefix":"osd pool ls"}';;
  "osd pool ls detail") exec "$d" "$conf" '{"prefix":"osd pool ls","detail":"detail"}';;
  "osd new "*) exec "$d" "$conf" "{\"prefix\":\"osd new\",\"uuid\":\"$3\"}";;
  "osd pool create "*) exec "$d" "$conf" "{\"prefix\":\"osd pool create\",\"pool\":\"$4\",\"pg_num\":${5:-8},\"pgp_num\":${6:-8}}";;
  "osd pool application enable "*) exec "$d" "$conf" "{\"prefix\":\"osd pool application enable\",\"pool\":\"$5\",\"app\":\"$6\"}";;
  *) echo "ceph stand-in: unsupported: $*" >&2; exit 1;;
esac
