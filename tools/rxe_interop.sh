#!/bin/bash
# rxe_interop.sh - interop between pyroce and Linux rxe (soft-RoCE in a VM): rdma-core's pingpong tools, perftest, the
# rdma_cm programs, UCX and qperf.
#
# Boots the rxevm guest (the VM kit named by RXEVM, see its README: Debian kernel 6.1 rdma_rxe + rdma-core 44 + perftest 4.5,
# reached over a tap inside network namespace 'rxevm'), then runs each tool in the guest against pyroce on the host
# side (10.77.0.1), both ways:
#   1. guest server  `ibv_TOOL -d rxe0 -g 1 ...`     <- pyroce client (host side)
#   2. pyroce server (host side)                      <- guest client `ibv_TOOL ... 10.77.0.1`
# The host side is pyroce's Python tool of the same name (tools/TOOL.py, a wrapper of `pyroce TOOL`), or with --c
# the real C program, Debian's, through pyroce's C driver: `pyroce run -- ibv_rc_pingpong -d pyroce0 -g 3 ...`.
# Tools: ibv_rc_pingpong, ibv_uc_pingpong, ibv_srq_pingpong and ibv_ud_pingpong (rc, uc, srq, ud) at each size
# (ud: at each of its sizes, which a UD message's one packet must fit: -S); with --c also perftest's RC tools
# (send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat: guest `ib_TOOL -d rxe0 -x 1 -F`, host
# `pyroce run -- ib_TOOL -d pyroce0 -x 3 -F`) at each perftest size (-P; atomic_bw: 8 bytes only).
# With --c also dv_rc: tests/c/mlx5dv_pingpong.c (built here against the system's libmlx5, run through `pyroce run`)
# against the guest's unmodified ibv_rc_pingpong at each size: the same exchange and ping-pong, its SENDs and receives
# posted by hand through mlx5dv (WQEs with mlx5dv_set_*_seg, the doorbell record and a UAR store, raw CQEs), and each
# message checked; SEND/RECV only (rc_pingpong's exchange gives no rkey, so no WRITE or READ).
# With --c also the rdma_cm programs (connections by IP address through pyroce's NIC's connection manager and the
# system's librdmacm): rping (-C count, -v, -V), ucmatose, udaddy, rdma_server/rdma_client (-t rdma_server) and
# perftest's ib_send_bw -R (-t send_bw_cm) and mckey (UD multicast: a receiver joins 239.77.0.9, the other side
# sends to it), each both ways; their servers are started by address, not TCP port.
# With --c also UCX's ucx_perftest (ucx_tag_lat: tag_lat 8 bytes, ucx_tag_bw: tag_bw 64 KiB, ucx_put_bw: ucp_put_bw
# 64 KiB; -U iterations; UCX_TLS=rc_verbs,ud_verbs,self on each side's device; on rxe UCX_UD_VERBS_ETH_DGID_CHECK=n,
# without which UCX's UD drops every packet rxe delivers, from rxe too) and qperf's rc_lat (2 bytes) and rc_bw
# (64 KiB) over rdma_cm (-cm1: qperf_lat, qperf_bw) and as on InfiniBand (qperf_lat_nocm, qperf_bw_nocm: no GRH,
# refused at RTR by rxe and pyroce alike, so not in the default list), -T seconds each (with -n 200 a pyroce client's
# rc_lat against rxe ran past 300 s: not looked into), rc_bw at MTU -m; a qperf server serves until it is stopped, so
# it passes if it is still running when its client has finished.
# pyroce runs with its default settings (ICRC checking on). The script prints both sides' output and checks that
# both exited 0, that each side's "remote address" lines are the other's "local address" lines, that the runs
# finished (pingpong: both sides' "ITERS iters in" line; perftest: the client's result row of SIZE and ITERS)
# and that pyroce counted no ICRC error (the Python tools' --stats line; a C program's from PYROCE_PRINT_STATS=1,
# printed when its device closes); it prints PASS or FAILED per pair and a summary line, and exits 0 only if
# every run passed on both sides (1 if a run failed, 2 on a setup error). A guest process of a failed run is
# killed. The VM is shut down at the end unless it was already running or --keep-vm is given.
#
# Run it as root (qemu, netns, tap) from anywhere:
#   tools/rxe_interop.sh                       # 1000 iterations of 1, 4096 and 65536 bytes each way, MTU 1024
#   tools/rxe_interop.sh -t uc -n 200 -s 4096 -c   # one tool, one size; -c makes both tools validate the buffer
#   tools/rxe_interop.sh --capture /tmp/cap    # also write TOOL1-SIZE.pcap / TOOL2-SIZE.pcap (tcpdump on the tap)
#   tools/rxe_interop.sh --c                   # the C tools on pyroce: the 4 pingpongs, dv_rc and 7 perftests
#   tools/rxe_interop.sh --c -t write_bw,read_lat -P 2,1048576 -N 100
#   tools/rxe_interop.sh --c -t rping,ucmatose,udaddy,rdma_server,send_bw_cm,mckey    # the rdma_cm programs
#   tools/rxe_interop.sh --c -t ucx_tag_lat,ucx_tag_bw,ucx_put_bw,qperf_lat,qperf_bw   # UCX and qperf
#
#   tools/rxe_interop.sh --c -t dv_rc          # posting by hand through mlx5dv against rxe
# Options: -t TOOLS (rc,uc,srq,ud; --c: also dv_rc,send_bw,write_bw,read_bw,atomic_bw,send_lat,write_lat,read_lat and
#   the rdma_cm programs rping,ucmatose,udaddy,rdma_server,send_bw_cm,mckey; ucx_tag_lat,ucx_tag_bw,ucx_put_bw; qperf_lat,
#   qperf_bw, and with -t only qperf_lat_nocm,qperf_bw_nocm)
#   -n ITERS (1000)  -C CM_ITERS (rping, ucmatose, udaddy: 10)  -s SIZES (1,4096,65536)  -S UD_SIZES (1,1024)
#   -P PERF_SIZES (perftest -s: 64,65536)  -N PERF_ITERS (perftest -n: 1000)  -U UCX_ITERS (ucx_perftest -n: 200)
#   -O PERF_OPTIONS (more perftest options, both sides, e.g. "-u 20": a 4.3 s local ACK timeout, which a TCG guest's rxe
#   needs at 64 KiB: with perftest's 67 ms it resends messages pyroce has acknowledged and can stall; docs/performance.md)
#   -T QPERF_SECONDS (qperf -t: 2)
#   -m MTU (1024)  -r RX_DEPTH (500)
#   -q NUM_QP (srq_pingpong's QPs, 16)  -p TCP_PORT (18515)
#   -g GUEST_GID_IDX (1 = ::ffff:10.77.0.2, rxe0's RoCEv2/IPv4 GID)  -c (validate buffers)
#   --c (the host side runs the C programs through `pyroce run`)
#   --capture DIR   --keep-vm (leave the guest running)   --timeout S (per run, 300)
#   --repeat N (each pair N times, each time its own PASS/FAILED line: a flaky pair shows; 1)
#   --vm-mtu M (tap/eth0 MTU for a new guest: 1500 -> rxe active_mtu 1024, 9000 -> 4096)
# Environment: RXEVM (path of the rxevm kit; default: shared/rxevm beside the checkout), PYTHON (python3),
#   RXEVM_DIR / RXEVM_NS / RXEVM_NET as in the kit. The host side runs this checkout's pyroce (PYTHONPATH=<repo>/src)
#   and needs its dependencies for PYTHON; --c needs ibverbs-utils, perftest, libibverbs-dev and a C compiler on
#   the host (the C driver is built once, before the runs).
# Not part of CI: it needs root, qemu and ~7 minutes at -n 300 (18 runs; build.sh is idempotent; a boot is ~15 s);
#   --c: 76 runs: the pingpongs' and perftests' 48 (-n 1000, -N 1000) in about 4.5 minutes, dv_rc's 6 (about 3 minutes
#   on a loaded 2-core host, a TCG guest: there plain rc at 64 KiB also fails now and then, transport retries exceeded), the rdma_cm programs' 12,
#   the UCX pairs' 6 in about 2 minutes and qperf's 4 in about 1.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
RXEVM="${RXEVM:-$REPO/../shared/rxevm}"
PYTHON="${PYTHON:-python3}"
NS="${RXEVM_NS:-rxevm}"
NET="${RXEVM_NET:-10.77.0}"
HOST_IP="$NET.1"   # the bridge in the netns (the kit's host address)
GUEST_IP="$NET.2"  # guest 1
TAP=rxetap1
PINGPONGS=(rc uc srq ud)
DVTESTS=(dv_rc)  # tests/c/mlx5dv_pingpong.c (SENDs and receives posted by hand through mlx5dv) against ibv_rc_pingpong
PERFTESTS=(send_bw write_bw read_bw atomic_bw send_lat write_lat read_lat)
CMTESTS=(rping ucmatose udaddy rdma_server send_bw_cm mckey)
MCAST_GROUP=239.77.0.9  # mckey's group: joined on each side's interface of the namespace's bridge
UCXTESTS=(ucx_tag_lat ucx_tag_bw ucx_put_bw)
QPERFTESTS=(qperf_lat qperf_bw)  # qperf_lat_nocm, qperf_bw_nocm: with -t only (they fail on rxe as on pyroce)
UCX_TLS=rc_verbs,ud_verbs,self  # the device's RC transport alone (ud_verbs: its connection), no shared memory or TCP

TOOLS_ARG=""; CM_ITERS=10; ITERS=1000; SIZES_ARG=1,4096,65536; UD_SIZES_ARG=1,1024; PERF_SIZES_ARG=64,65536; PERF_ITERS=1000; PERF_OPTIONS=""; UCX_ITERS=200; QPERF_SECONDS=2
MTU=1024; RXD=500; NQP=16; PORT=18515; GIDX=1; CHK=""; C_MODE=0
CAPTURE=""; KEEP=0; TIMEOUT=300; VM_MTU=1500; REPEAT=1
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while (($#)); do
  case "$1" in
    -t) TOOLS_ARG="$2"; shift 2;;
    -n) ITERS="$2"; shift 2;;
    -C) CM_ITERS="$2"; shift 2;;
    -s) SIZES_ARG="$2"; shift 2;;
    -S) UD_SIZES_ARG="$2"; shift 2;;
    -P) PERF_SIZES_ARG="$2"; shift 2;;
    -N) PERF_ITERS="$2"; shift 2;;
    -O) PERF_OPTIONS="$2"; shift 2;;
    -U) UCX_ITERS="$2"; shift 2;;
    -T) QPERF_SECONDS="$2"; shift 2;;
    -m) MTU="$2"; shift 2;;
    -r) RXD="$2"; shift 2;;
    -q) NQP="$2"; shift 2;;
    -p) PORT="$2"; shift 2;;
    -g) GIDX="$2"; shift 2;;
    -c) CHK="-c"; shift;;
    --c) C_MODE=1; shift;;
    --capture) CAPTURE="$2"; shift 2;;
    --keep-vm) KEEP=1; shift;;
    --repeat) REPEAT="$2"; shift 2;;
    --timeout) TIMEOUT="$2"; shift 2;;
    --vm-mtu) VM_MTU="$2"; shift 2;;
    -h|--help) usage; exit 0;;
    *) echo "rxe_interop.sh: unknown argument '$1' (see --help)" >&2; exit 2;;
  esac
done

die() { echo "rxe_interop.sh: $*" >&2; exit 2; }
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat wants a count of 1 or more, not '$REPEAT'"
if ((C_MODE)); then DEFAULT_TOOLS=("${PINGPONGS[@]}" "${DVTESTS[@]}" "${PERFTESTS[@]}" "${CMTESTS[@]}" "${UCXTESTS[@]}" "${QPERFTESTS[@]}"); else DEFAULT_TOOLS=("${PINGPONGS[@]}"); fi
[[ -n "$TOOLS_ARG" ]] || TOOLS_ARG="$(IFS=,; echo "${DEFAULT_TOOLS[*]}")"
is_dvtest() { [[ " ${DVTESTS[*]} " == *" $1 "* ]]; }
is_perftest() { [[ " ${PERFTESTS[*]} " == *" $1 "* ]]; }
is_cmtest() { [[ " ${CMTESTS[*]} " == *" $1 "* ]]; }
is_ucxtest() { [[ " ${UCXTESTS[*]} " == *" $1 "* ]]; }
is_qperftest() { [[ " ${QPERFTESTS[*]} " == *" $1 "* || "$1" == qperf_lat_nocm || "$1" == qperf_bw_nocm ]]; }
IFS=, read -ra TOOLS <<<"$TOOLS_ARG"
for T in "${TOOLS[@]}"; do
  if is_dvtest "$T" || is_perftest "$T" || is_cmtest "$T" || is_ucxtest "$T" || is_qperftest "$T"; then
    ((C_MODE)) || die "'$T' runs with --c only (the C program through pyroce run)"
  elif [[ " ${PINGPONGS[*]} " != *" $T "* ]]; then
    die "unknown tool '$T' in -t (${PINGPONGS[*]} ${DVTESTS[*]} ${PERFTESTS[*]} ${CMTESTS[*]} ${UCXTESTS[*]} ${QPERFTESTS[*]} qperf_lat_nocm qperf_bw_nocm)"
  fi
done
[[ $EUID -eq 0 ]] || die "must run as root (qemu, network namespace, tap)"
[[ -x "$RXEVM/up.sh" ]] || die "rxevm kit not found at $RXEVM (set RXEVM)"
RXEVM="$(cd "$RXEVM" && pwd)"
RXEVM_DIR="${RXEVM_DIR:-/var/tmp/rxevm}"
export RXEVM_DIR RXEVM_NS="$NS"
NSX=(ip netns exec "$NS")
# this checkout's pyroce, with its default settings (ICRC checking on); a C program's device prints its
# counters when it closes
HOST_ENV=(env PYROCE_ADDR="$HOST_IP" PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}")
((C_MODE)) && HOST_ENV+=(PYROCE_PRINT_STATS=1)
WORK="$(mktemp -d /tmp/rxe_interop.XXXXXX)"

# the host side's programs (--c): each tool's, all there and the C driver built, before the VM boots
guest_program() {
  case "$1" in
    send_bw_cm) echo ib_send_bw;;
    rping|ucmatose|udaddy|rdma_server|mckey) echo "$1";;
    ucx_*) echo ucx_perftest;;
    qperf_*) echo qperf;;
    dv_rc) echo ibv_rc_pingpong;;
    *) if is_perftest "$1"; then echo "ib_$1"; else echo "ibv_$1_pingpong"; fi;;
  esac
}
if ((C_MODE)); then
  for T in "${TOOLS[@]}"; do
    command -v "$(guest_program "$T")" >/dev/null || die "$(guest_program "$T") is not installed on this host (apt-get install ibverbs-utils perftest ucx-utils qperf)"
  done
  echo "=== building pyroce's C driver ($PYTHON -m pyroce run --print-env)"
  "${HOST_ENV[@]}" "$PYTHON" -m pyroce run --print-env >"$WORK/driver.log" 2>&1 || { cat "$WORK/driver.log" >&2; die "the C driver did not build"; }
  if [[ " ${TOOLS[*]} " == *" dv_rc "* ]]; then  # built against the system's libmlx5, run on pyroce's
    echo "=== building tests/c/mlx5dv_pingpong.c"
    cc -O2 -Wall -Werror -o "$WORK/mlx5dv_pingpong" "$REPO/tests/c/mlx5dv_pingpong.c" -lmlx5 -libverbs \
      || die "tests/c/mlx5dv_pingpong.c did not build (libibverbs-dev's infiniband/mlx5dv.h and libmlx5.so)"
  fi
fi

STARTED_VM=0
TCPDUMP_PID=""
SERVER_PID=""
JOB=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill "$SERVER_PID" 2>/dev/null; fi
  # a guest job still running (the script was interrupted, or a run failed): stop it, so no
  # tool is left behind in the guest
  if [[ -n "$JOB" ]]; then "$RXEVM/vmexec.sh" -i 1 --kill "$JOB" >/dev/null 2>&1 || true; fi
  # the C tools' shared NIC (pyroce nicd), which the first of them started in the netns
  if ((C_MODE)); then "${HOST_ENV[@]}" "${NSX[@]}" "$PYTHON" -m pyroce nicd --stop >/dev/null 2>&1 || true; fi
  stop_capture
  if ((STARTED_VM && !KEEP)); then
    echo "=== shutting the guest down"
    "$RXEVM/down.sh" -i 1 >/dev/null 2>&1 || echo "warning: down.sh failed" >&2
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_capture() {  # start_capture NAME
  [[ -n "$CAPTURE" ]] || return 0
  mkdir -p "$CAPTURE"
  "${NSX[@]}" tcpdump -U -ni "$TAP" -w "$CAPTURE/$1.pcap" "udp port 4791 or tcp port $PORT" \
    >"$WORK/tcpdump.log" 2>&1 &
  TCPDUMP_PID=$!
  sleep 1  # let tcpdump open the interface
}
stop_capture() {
  if [[ -n "$TCPDUMP_PID" ]]; then
    sleep 0.5
    kill "$TCPDUMP_PID" 2>/dev/null; wait "$TCPDUMP_PID" 2>/dev/null
    TCPDUMP_PID=""
  fi
}

# ---------------------------------------------------------------- the guest
if [[ -f "$RXEVM_DIR/run/1/qemu.pid" ]] && [[ -r "/proc/$(cat "$RXEVM_DIR/run/1/qemu.pid")/cmdline" ]] \
   && tr '\0' ' ' <"/proc/$(cat "$RXEVM_DIR/run/1/qemu.pid")/cmdline" | grep -q 'qemu-system.*rxevm'; then
  echo "=== rxevm guest 1 already running: using it (and leaving it up)"
else
  echo "=== building/refreshing the rxevm image ($RXEVM/build.sh)"
  "$RXEVM/build.sh" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log" >&2; die "build.sh failed"; }
  echo "=== booting the rxevm guest ($RXEVM/up.sh --mtu $VM_MTU)"
  STARTED_VM=1
  "$RXEVM/up.sh" --mtu "$VM_MTU" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; die "up.sh failed"; }
  grep -E 'guest ready|gid\[' "$WORK/up.log"
fi
guest() { "$RXEVM/vmexec.sh" -i 1 "$@"; }
GUEST_PROGRAMS=(); for T in "${TOOLS[@]}"; do GUEST_PROGRAMS+=("$(guest_program "$T")"); done
guest --timeout 60 "command -v ${GUEST_PROGRAMS[*]} >/dev/null && rdma link show rxe0/1" \
  | sed 's/^/  /' || die "the guest has no rxe0 or lacks one of ${GUEST_PROGRAMS[*]}"

# address parts of the "  local address:  LID ..." / "  remote address: LID ..." lines (srq: one per QP;
# ud_pingpong prints "PSN 0x...: GID" on its local line, ", GID" on its remote one; perftest adds RKey and VAddr)
addr_of() { sed -n "s/^ *$1 address: *//p" "$2" | sed 's/: GID/, GID/'; }

# check NAME ROLE1 RC1 OUT1 ROLE2 RC2 OUT2 (ROLE: server or client; the guest's first): prints the verdict,
# returns 0 if the run passed. A side passed if it exited 0 and its output has a line matching SERVER_DONE or
# CLIENT_DONE (by its role; empty: none needed).
check() {
  local name="$1" ok=1 role rc out done_re who label
  for who in guest host; do
    role="$2" rc="$3" out="$4"; shift 3
    [[ "$who" == host ]] && label="$HOST_LABEL" || label="guest $GUEST_LABEL"
    [[ "$rc" == 0 ]] || { echo "  FAIL: $label exited $rc"; ok=0; }
    [[ "$role" == server ]] && done_re="$SERVER_DONE" || done_re="$CLIENT_DONE"
    if [[ -n "$done_re" ]] && ! grep -Eq "$done_re" "$out"; then echo "  FAIL: no line '$done_re' from $label"; ok=0; fi
    if grep -q 'invalid data' "$out"; then echo "  FAIL: $label found invalid data"; ok=0; fi
  done
  local gout="$WORK/guest.out" hout="$WORK/pyroce.out"
  if grep -q "icrc_errors" "$hout"; then
    grep -Eq "icrc_errors 0(,|$)" "$hout" || { echo "  FAIL: pyroce counted ICRC errors"; ok=0; }
  elif ((C_MODE)); then  # a program that never closes its device (librdmacm's) prints none: ask the shared NIC
    [[ "$(shared_nic_icrc_errors)" == 0 ]] || { echo "  FAIL: the shared NIC counted ICRC errors (or has no counters)"; ok=0; }
  else
    echo "  FAIL: pyroce printed no counters"; ok=0
  fi
  if ((ADDR_LINES)) && { [[ "$(addr_of local "$gout")" != "$(addr_of remote "$hout")" || -z "$(addr_of local "$gout")" ]] \
     || [[ "$(addr_of local "$hout")" != "$(addr_of remote "$gout")" || -z "$(addr_of local "$hout")" ]]; }; then
    echo "  FAIL: the local/remote address lines of the two sides do not match"; ok=0
  fi
  if ((ok)); then echo "  PASS: $name"; PASSED+=("$name"); return 0; fi
  echo "  FAILED: $name"; FAILURES+=("$name"); return 1
}

shared_nic_icrc_errors() {  # the ICRC errors the shared NIC at HOST_IP has counted (its stats file, published each second)
  sleep 1.2
  "${NSX[@]}" "${HOST_ENV[@]}" "$PYTHON" -m pyroce stats --json 2>/dev/null | "$PYTHON" -c '
import json, sys
rows = [row for row in json.load(sys.stdin) if row["address"] == sys.argv[1]]
print(sum(row["counters"].get("icrc_errors", 0) for row in rows) if rows else "none")' "$HOST_IP"
}

wait_guest_listen() {  # wait_guest_listen JOB: 0 once the guest listens (TCP PORT, or an rdma_cm id), 1 if JOB ended first
  local listening="ss -Hltn 'sport = :$PORT' | grep -q ."
  # an rdma_cm server: its listening id, and a second for what it does next (perftest -R listens again)
  [[ "$LISTEN" == cm ]] && listening="rdma resource show cm_id 2>/dev/null | grep -q LISTEN && sleep 1"
  [[ "$LISTEN" == joined ]] && listening="grep -q 'joined dgid' /mnt/host/q/$1.out"  # mckey's receiver
  guest --timeout 70 "for i in \$(seq 1 300); do $listening && exit 0;
    [ -f /mnt/host/q/$1.rc ] && exit 1; sleep 0.2; done; exit 1"
}
wait_host_listen() {
  local i
  if [[ "$LISTEN" == joined ]]; then  # mckey's receiver: once it says it joined the group
    for i in $(seq 1 300); do
      grep -q 'joined dgid' "$WORK/pyroce.out" && return 0
      kill -0 "$SERVER_PID" 2>/dev/null || return 1
      sleep 0.1
    done
    return 1
  fi
  if [[ "$LISTEN" != tcp ]]; then  # an rdma_cm server listens in the NIC: give it the time a program takes to start
    sleep 3; kill -0 "$SERVER_PID" 2>/dev/null; return
  fi
  for i in $(seq 1 150); do
    "${NSX[@]}" ss -Hltn "sport = :$PORT" | grep -q . && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

PASSED=(); FAILURES=()

# pingpong_pair T SIZE: the commands of ibv_T_pingpong at SIZE bytes
pingpong_pair() {
  local tool="${1#dv_}_pingpong" chk="$CHK"
  COMMON=(-p "$PORT" -s "$2" -r "$RXD" -n "$ITERS")
  [[ "$1" == ud ]] || COMMON+=(-m "$MTU")  # ud_pingpong has no -m (nor -c)
  [[ "$1" == srq ]] && COMMON+=(-q "$NQP")
  [[ "$1" == ud ]] && chk=""
  GUEST_CMD="ibv_$tool -d rxe0 -g $GIDX ${COMMON[*]}${chk:+ $chk}"
  GUEST_LABEL="ibv_$tool"
  if [[ "$1" == dv_rc ]]; then  # the host side posts by hand through mlx5dv
    HOST_CMD=("$PYTHON" -m pyroce run -- "$WORK/mlx5dv_pingpong" -d pyroce0 -g 3 "${COMMON[@]}" ${chk:+"$chk"})
    HOST_LABEL="pyroce run -- mlx5dv_pingpong"
  elif ((C_MODE)); then
    HOST_CMD=("$PYTHON" -m pyroce run -- "ibv_$tool" -d pyroce0 -g 3 "${COMMON[@]}" ${chk:+"$chk"})
    HOST_LABEL="pyroce run -- ibv_$tool"
  else
    HOST_CMD=("$PYTHON" "$REPO/tools/$tool.py" -d pyroce0 -g 3 --stats "${COMMON[@]}" ${chk:+"$chk"})
    HOST_LABEL="pyroce $tool.py"
  fi
  SERVER_DONE="^$ITERS iters in "; CLIENT_DONE="$SERVER_DONE"
  same_program_both_roles
}

# same_program_both_roles: a server is GUEST_CMD / HOST_CMD, a client the same with the server's address last
same_program_both_roles() {
  ADDR_LINES=1; LISTEN=tcp; SERVER_STAYS=0
  G_SERVER="$GUEST_CMD"; G_CLIENT="$GUEST_CMD $HOST_IP"
  H_SERVER=("${HOST_CMD[@]}"); H_CLIENT=("${HOST_CMD[@]}" "$GUEST_IP")
}

# cm_pair T SIZE: an rdma_cm program's server and client (SIZE: rping's -S, ib_send_bw's -s; else unused)
cm_pair() {
  local host_run=("$PYTHON" -m pyroce run --)
  ADDR_LINES=0; LISTEN=cm; SERVER_STAYS=0
  case "$1" in
    rping)  # the server binds the address; -V makes both sides check every ping's data
      G_SERVER="rping -s -a $GUEST_IP -C $CM_ITERS -S $2 -v -V"; G_CLIENT="rping -c -a $HOST_IP -C $CM_ITERS -S $2 -v -V"
      H_SERVER=("${host_run[@]}" rping -s -a "$HOST_IP" -C "$CM_ITERS" -S "$2" -v -V)
      H_CLIENT=("${host_run[@]}" rping -c -a "$GUEST_IP" -C "$CM_ITERS" -S "$2" -v -V)
      SERVER_DONE="server ping data: rdma-ping-$((CM_ITERS - 1)): "; CLIENT_DONE="^ping data: rdma-ping-$((CM_ITERS - 1)): ";;
    ucmatose|udaddy)
      G_SERVER="$1 -b $GUEST_IP -C $CM_ITERS"; G_CLIENT="$1 -s $HOST_IP -C $CM_ITERS"
      H_SERVER=("${host_run[@]}" "$1" -b "$HOST_IP" -C "$CM_ITERS"); H_CLIENT=("${host_run[@]}" "$1" -s "$GUEST_IP" -C "$CM_ITERS")
      SERVER_DONE="^test complete"; CLIENT_DONE="^test complete";;
    rdma_server)
      G_SERVER="rdma_server -s $GUEST_IP"; G_CLIENT="rdma_client -s $HOST_IP"
      H_SERVER=("${host_run[@]}" rdma_server -s "$HOST_IP"); H_CLIENT=("${host_run[@]}" rdma_client -s "$GUEST_IP")
      SERVER_DONE="^rdma_server: end 0"; CLIENT_DONE="^rdma_client: end 0";;
    send_bw_cm)  # perftest connecting through rdma_cm (-R) instead of its TCP exchange
      local common=(-R -F -p "$PORT" -n "$PERF_ITERS" -s "$2")
      G_SERVER="ib_send_bw -d rxe0 -x $GIDX ${common[*]}"; G_CLIENT="$G_SERVER $HOST_IP"
      H_SERVER=("${host_run[@]}" ib_send_bw -d pyroce0 -x 3 "${common[@]}"); H_CLIENT=("${H_SERVER[@]}" "$GUEST_IP")
      SERVER_DONE=""; CLIENT_DONE="^ *$2 +$PERF_ITERS ";;
    mckey)  # UD multicast: the "server" joins the group and takes -C datagrams the "client" sends to it; it
      # listens on nothing: it is ready once it printed that it joined (line-buffered by stdbuf)
      G_SERVER="stdbuf -oL mckey -m $MCAST_GROUP -b $GUEST_IP -C $CM_ITERS"
      G_CLIENT="mckey -m $MCAST_GROUP -b $GUEST_IP -s -C $CM_ITERS"
      H_SERVER=("${host_run[@]}" stdbuf -oL mckey -m "$MCAST_GROUP" -b "$HOST_IP" -C "$CM_ITERS")
      H_CLIENT=("${host_run[@]}" mckey -m "$MCAST_GROUP" -b "$HOST_IP" -s -C "$CM_ITERS")
      LISTEN=joined; SERVER_DONE="^test complete"; CLIENT_DONE="^test complete";;
  esac
  GUEST_LABEL="${G_SERVER#stdbuf -oL }"; GUEST_LABEL="${GUEST_LABEL%% *}"; HOST_LABEL="pyroce run -- $GUEST_LABEL"
}

# perftest_pair T SIZE: the commands of ib_T at SIZE bytes (atomic_bw: its 8 bytes), RC
perftest_pair() {
  local extra; read -ra extra <<< "$PERF_OPTIONS"
  COMMON=(-F -p "$PORT" -n "$PERF_ITERS" "${extra[@]}")
  [[ "$1" == atomic_bw ]] || COMMON+=(-s "$2")
  GUEST_CMD="ib_$1 -d rxe0 -x $GIDX ${COMMON[*]}"
  GUEST_LABEL="ib_$1"
  HOST_CMD=("$PYTHON" -m pyroce run -- "ib_$1" -d pyroce0 -x 3 "${COMMON[@]}")
  HOST_LABEL="pyroce run -- ib_$1"
  # the client's result row: "#bytes #iterations ..."; a server may print none (read_lat's)
  SERVER_DONE=""; CLIENT_DONE="^ *$2 +$PERF_ITERS "
  same_program_both_roles
}

# ucx_pair T SIZE: ucx_perftest's test (tag_lat, tag_bw, ucp_put_bw) at SIZE bytes on each side's device's RC
# transport; its server exits after one test, its client prints "Final: ITERS ..."
ucx_pair() {
  local test="${1#ucx_}" common
  [[ "$test" == put_bw ]] && test=ucp_put_bw
  common="-p $PORT"; local options=(-t "$test" -s "$2" -n "$UCX_ITERS")
  # on rxe UCX's check of a UD packet's destination GID drops every packet (rxe to rxe too): off in the guest
  G_SERVER="UCX_TLS=$UCX_TLS UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n ucx_perftest $common"; G_CLIENT="$G_SERVER ${options[*]} $HOST_IP"
  H_SERVER=(env UCX_TLS="$UCX_TLS" UCX_NET_DEVICES=pyroce0:1 "$PYTHON" -m pyroce run -- ucx_perftest -p "$PORT")
  H_CLIENT=("${H_SERVER[@]}" "${options[@]}" "$GUEST_IP")
  GUEST_LABEL="ucx_perftest"; HOST_LABEL="pyroce run -- ucx_perftest"
  ADDR_LINES=0; LISTEN=tcp; SERVER_STAYS=0
  SERVER_DONE=""; CLIENT_DONE="^Final: +$UCX_ITERS "
}

# qperf_pair T SIZE: qperf's rc_lat or rc_bw at SIZE bytes, over rdma_cm (-cm1) or, for T *_nocm, connected by its
# own exchange of QP numbers and LIDs (no GRH); its server (qperf -lp PORT) serves until stopped
qperf_pair() {
  local test=rc_lat options=(-lp "$PORT" -m "$2" -t "$QPERF_SECONDS")
  [[ "$1" == qperf_bw* ]] && test=rc_bw && options+=(-mt "$MTU")  # rc_lat has no use for -mt (it says so)
  [[ "$1" == *_nocm ]] || options+=(-cm1)
  # the guest server in a process group of its own: qperf forks a child per test, which its parent's end leaves
  G_SERVER="set -m; qperf -lp $PORT & echo \$! >/tmp/qperf-server.pid; wait \$!"; G_CLIENT="qperf ${options[*]} $HOST_IP $test"
  G_STOP='kill -- -$(cat /tmp/qperf-server.pid)'
  H_SERVER=("$PYTHON" -m pyroce run -- qperf -lp "$PORT"); H_CLIENT=("$PYTHON" -m pyroce run -- qperf "${options[@]}" "$GUEST_IP" "$test")
  GUEST_LABEL="qperf"; HOST_LABEL="pyroce run -- qperf"
  ADDR_LINES=0; LISTEN=tcp; SERVER_STAYS=1
  SERVER_DONE=""; CLIENT_DONE="^ +(latency|bw) += "
}

# stop_guest_server: a server that serves until stopped (SERVER_STAYS) and still runs is stopped and passes (GRC 0)
stop_guest_server() {
  ((SERVER_STAYS && GRC == 124)) || return 0
  guest --timeout 20 "$G_STOP" >/dev/null 2>&1
  guest --wait "$JOB" --timeout 20 >"$WORK/guest.out" 2>&1
  echo "(a server to the end: stopped after its client)" >>"$WORK/guest.out"; GRC=0
}

# run_pair SHORT SIZE: both directions of GUEST_CMD / HOST_CMD
run_pair() {
  local short="$1" size="$2"
  # ---------------------------------------------------------------- 1: guest server, pyroce client
  echo
  echo "=== $short run 1 ($size bytes): guest $GUEST_LABEL server <- $HOST_LABEL client"
  start_capture "${short}1-$size"
  echo "--- guest ($GUEST_IP, rxe0): $G_SERVER"
  JOB="$(guest --bg "$G_SERVER")" || die "cannot start the guest server"
  if wait_guest_listen "$JOB" >/dev/null 2>&1; then
    "${NSX[@]}" "${HOST_ENV[@]}" timeout "$TIMEOUT" "${H_CLIENT[@]}" >"$WORK/pyroce.out" 2>&1
    HRC=$?
  else
    echo "guest server is not listening" >"$WORK/pyroce.out"; HRC=2
  fi
  # the server finishes right after the client; if the client failed, it may never (blocked in accept)
  guest --wait "$JOB" --timeout "$( ((SERVER_STAYS)) && echo 2 || { ((HRC == 0)) && echo "$TIMEOUT" || echo 15; })" \
    >"$WORK/guest.out" 2>&1
  GRC=$?
  stop_guest_server
  if [[ "$GRC" == 124 ]]; then guest --kill "$JOB" >/dev/null 2>&1; echo "(timed out; killed)" >>"$WORK/guest.out"; fi
  JOB=""
  stop_capture
  sed 's/^/    /' "$WORK/guest.out"; echo "    [exit $GRC]"
  echo "--- pyroce ($HOST_IP, pyroce0): ${HOST_ENV[*]:1} ip netns exec $NS ${H_CLIENT[*]}"
  sed 's/^/    /' "$WORK/pyroce.out"; echo "    [exit $HRC]"
  check "$short $size bytes: guest server / pyroce client" server "$GRC" "$WORK/guest.out" client "$HRC" "$WORK/pyroce.out"

  # ---------------------------------------------------------------- 2: pyroce server, guest client
  echo
  echo "=== $short run 2 ($size bytes): $HOST_LABEL server <- guest $GUEST_LABEL client"
  start_capture "${short}2-$size"
  "${NSX[@]}" "${HOST_ENV[@]}" timeout "$TIMEOUT" "${H_SERVER[@]}" >"$WORK/pyroce.out" 2>&1 &
  SERVER_PID=$!
  if wait_host_listen; then
    JOB="$(guest --bg "$G_CLIENT")" || die "cannot start the guest client"
    guest --wait "$JOB" --timeout "$TIMEOUT" >"$WORK/guest.out" 2>&1
    GRC=$?
    if [[ "$GRC" == 124 ]]; then guest --kill "$JOB" >/dev/null 2>&1; echo "(timed out; killed)" >>"$WORK/guest.out"; fi
    JOB=""
  else
    echo "pyroce server is not listening" >"$WORK/guest.out"; GRC=2
  fi
  # a server that serves until stopped passes if it still runs; stop it
  local stopped=0
  if ((SERVER_STAYS)) && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"; wait "$SERVER_PID"; stopped=1
    echo "(a server to the end: stopped after its client)" >>"$WORK/pyroce.out"
  fi
  # likewise: a server whose client failed may wait for it forever; give it 15 s
  if ((GRC != 0 && !stopped)); then
    for _ in $(seq 1 150); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$SERVER_PID" 2>/dev/null && echo "(still waiting 15 s after the client failed; killed)" >>"$WORK/pyroce.out"
  fi
  if ((stopped)); then HRC=0; else wait "$SERVER_PID"; HRC=$?; fi
  SERVER_PID=""
  stop_capture
  echo "--- pyroce ($HOST_IP, pyroce0): ${HOST_ENV[*]:1} ip netns exec $NS ${H_SERVER[*]}"
  sed 's/^/    /' "$WORK/pyroce.out"; echo "    [exit $HRC]"
  echo "--- guest ($GUEST_IP, rxe0): $G_CLIENT"
  sed 's/^/    /' "$WORK/guest.out"; echo "    [exit $GRC]"
  check "$short $size bytes: pyroce server / guest client" client "$GRC" "$WORK/guest.out" server "$HRC" "$WORK/pyroce.out"
}

for T in "${TOOLS[@]}"; do
  if [[ "$T" == rping ]]; then SIZES=(64)
  elif [[ "$T" == ucmatose || "$T" == udaddy || "$T" == rdma_server || "$T" == mckey ]]; then SIZES=(0)
  elif [[ "$T" == send_bw_cm ]]; then IFS=, read -ra SIZES <<<"$PERF_SIZES_ARG"
  elif [[ "$T" == ucx_tag_lat ]]; then SIZES=(8)
  elif [[ "$T" == qperf_lat* ]]; then SIZES=(2)
  elif is_ucxtest "$T" || is_qperftest "$T"; then SIZES=(65536)
  elif is_perftest "$T"; then
    if [[ "$T" == atomic_bw ]]; then SIZES=(8); else IFS=, read -ra SIZES <<<"$PERF_SIZES_ARG"; fi
  elif [[ "$T" == ud ]]; then IFS=, read -ra SIZES <<<"$UD_SIZES_ARG"
  else IFS=, read -ra SIZES <<<"$SIZES_ARG"; fi
  for SIZE in "${SIZES[@]}"; do
    if is_cmtest "$T"; then cm_pair "$T" "$SIZE"
    elif is_ucxtest "$T"; then ucx_pair "$T" "$SIZE"
    elif is_qperftest "$T"; then qperf_pair "$T" "$SIZE"
    elif is_perftest "$T"; then perftest_pair "$T" "$SIZE"; else pingpong_pair "$T" "$SIZE"; fi
    for ((REP = 1; REP <= REPEAT; REP++)); do
      if ((REPEAT > 1)); then run_pair "$T.$REP" "$SIZE"; else run_pair "$T" "$SIZE"; fi
    done
  done
done

echo
[[ -n "$CAPTURE" ]] && echo "captures: $CAPTURE/TOOL1-SIZE.pcap, TOOL2-SIZE.pcap (decode: pyroce decode FILE)"
echo "=== results"
for name in "${PASSED[@]}"; do echo "  passed: $name"; done
for name in "${FAILURES[@]}"; do echo "  failed: $name"; done
if ((C_MODE)); then HOST_SIDE="the C tools through pyroce run"; else HOST_SIDE="pyroce's Python tools"; fi
SUMMARY="${#PASSED[@]} passed, ${#FAILURES[@]} failed (${TOOLS_ARG//,/, }; pingpong at ${SIZES_ARG//,/, } bytes"
SUMMARY+=" (ud: ${UD_SIZES_ARG//,/, }), -n $ITERS"
((C_MODE)) && SUMMARY+="; perftest at ${PERF_SIZES_ARG//,/, } bytes, -n $PERF_ITERS; ucx_perftest -n $UCX_ITERS; qperf -t $QPERF_SECONDS"
SUMMARY+="; both directions; host side: $HOST_SIDE"
((REPEAT > 1)) && SUMMARY+="; each pair $REPEAT times"
SUMMARY+=")"
if ((${#FAILURES[@]})); then echo "=== rxe interop: FAILED: $SUMMARY"; exit 1; fi
echo "=== rxe interop: $SUMMARY"
exit 0
