#!/bin/bash
# rxe_interop.sh - ibv_rc_pingpong interop between pyroce and Linux rxe (soft-RoCE in a VM).
#
# Boots the rxevm guest (../shared/rxevm, see its README: Debian kernel 6.1 rdma_rxe + rdma-core 44,
# reached over a tap inside network namespace 'rxevm'), then runs rdma-core's ibv_rc_pingpong
# against tools/rc_pingpong.py both ways:
#   1. guest server  `ibv_rc_pingpong -d rxe0 -g 1 ...`           <- pyroce client (host side, 10.77.0.1)
#   2. pyroce server `tools/rc_pingpong.py ...` (10.77.0.1)      <- guest client `ibv_rc_pingpong ... 10.77.0.1`
# at each size, with pyroce's default settings (ICRC checking on). It prints both sides' output,
# checks that each side's "remote address" is the other's "local address" and that pyroce
# counted no ICRC error, and exits 0 only if every run passed on both sides (1 if a run failed,
# 2 on a setup error). A guest process of a failed run is killed. The VM is shut down at the end
# unless it was already running or --keep-vm is given.
#
# Run it as root (qemu, netns, tap) from anywhere:
#   tools/rxe_interop.sh                       # 1000 iterations of 1, 4096 and 65536 bytes each way, MTU 1024
#   tools/rxe_interop.sh -n 200 -s 4096 -c     # one size; -c makes both tools validate the buffer
#   tools/rxe_interop.sh --capture /tmp/cap    # also write rc1-SIZE.pcap / rc2-SIZE.pcap (tcpdump on the tap)
#
# Options: -n ITERS (1000)  -s SIZES (1,4096,65536)  -m MTU (1024)  -r RX_DEPTH (500)  -p TCP_PORT (18515)
#   -g GUEST_GID_IDX (1 = ::ffff:10.77.0.2, rxe0's RoCEv2/IPv4 GID)  -c (validate buffers)
#   --capture DIR   --keep-vm (leave the guest running)   --timeout S (per run, 300)
#   --vm-mtu M (tap/eth0 MTU for a new guest: 1500 -> rxe active_mtu 1024, 9000 -> 4096)
# Environment: RXEVM (path of the rxevm kit, default <repo>/../shared/rxevm), PYTHON (python3),
#   RXEVM_DIR / RXEVM_NS / RXEVM_NET as in the kit. Needs pyroce's dependencies (pip install -e .) for PYTHON.
# Not part of CI: it needs root, qemu and ~1 minute (build.sh is idempotent; a boot is ~15 s).
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

ITERS=1000; SIZES_ARG=1,4096,65536; MTU=1024; RXD=500; PORT=18515; GIDX=1; CHK=""; CAPTURE=""; KEEP=0; TIMEOUT=300
VM_MTU=1500
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    -n) ITERS="$2"; shift 2;;
    -s) SIZES_ARG="$2"; shift 2;;
    -m) MTU="$2"; shift 2;;
    -r) RXD="$2"; shift 2;;
    -p) PORT="$2"; shift 2;;
    -g) GIDX="$2"; shift 2;;
    -c) CHK="-c"; shift;;
    --capture) CAPTURE="$2"; shift 2;;
    --keep-vm) KEEP=1; shift;;
    --timeout) TIMEOUT="$2"; shift 2;;
    --vm-mtu) VM_MTU="$2"; shift 2;;
    -h|--help) usage; exit 0;;
    *) echo "rxe_interop.sh: unknown argument '$1' (see --help)" >&2; exit 2;;
  esac
done

die() { echo "rxe_interop.sh: $*" >&2; exit 2; }
[[ $EUID -eq 0 ]] || die "must run as root (qemu, network namespace, tap)"
[[ -x "$RXEVM/up.sh" ]] || die "rxevm kit not found at $RXEVM (set RXEVM)"
RXEVM="$(cd "$RXEVM" && pwd)"
RXEVM_DIR="${RXEVM_DIR:-/var/tmp/rxevm}"
export RXEVM_DIR RXEVM_NS="$NS"
NSX=(ip netns exec "$NS")
PP="$REPO/tools/rc_pingpong.py"  # a wrapper of `pyroce rc_pingpong`
HOST_ENV=(env PYROCE_ADDR="$HOST_IP")  # default settings: ICRC checking on
WORK="$(mktemp -d /tmp/rxe_interop.XXXXXX)"

STARTED_VM=0
TCPDUMP_PID=""
SERVER_PID=""
JOB=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill "$SERVER_PID" 2>/dev/null; fi
  # a guest job still running (the script was interrupted, or a run failed): stop it, so no
  # ibv_rc_pingpong is left behind in the guest
  if [[ -n "$JOB" ]]; then "$RXEVM/vmexec.sh" -i 1 --kill "$JOB" >/dev/null 2>&1 || true; fi
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
guest --timeout 60 'ibv_rc_pingpong -h >/dev/null 2>&1; rdma link show rxe0/1' | sed 's/^/  /' \
  || die "the guest has no rxe0"

# address part of a "  local address:  LID ..." / "  remote address: LID ..." line
addr_of() { sed -n "s/^ *$1 address: *//p" "$2" | head -1; }

# check NAME GUEST_RC GUEST_OUT HOST_RC HOST_OUT: prints the verdict, returns 0 if the run passed
check() {
  local name="$1" grc="$2" gout="$3" hrc="$4" hout="$5" ok=1 f
  [[ "$grc" == 0 ]] || { echo "  FAIL: guest ibv_rc_pingpong exited $grc"; ok=0; }
  [[ "$hrc" == 0 ]] || { echo "  FAIL: pyroce rc_pingpong.py exited $hrc"; ok=0; }
  for f in "$gout" "$hout"; do
    grep -q "^$ITERS iters in " "$f" || { echo "  FAIL: no '$ITERS iters in' line from $(basename "$f" .out)"; ok=0; }
    if grep -q 'invalid data' "$f"; then echo "  FAIL: $(basename "$f" .out) found invalid data"; ok=0; fi
  done
  grep -q "icrc_errors 0," "$hout" || { echo "  FAIL: pyroce counted ICRC errors (or printed no counters)"; ok=0; }
  if [[ "$(addr_of local "$gout")" != "$(addr_of remote "$hout")" || -z "$(addr_of local "$gout")" ]] \
     || [[ "$(addr_of local "$hout")" != "$(addr_of remote "$gout")" || -z "$(addr_of local "$hout")" ]]; then
    echo "  FAIL: the local/remote address lines of the two sides do not match"; ok=0
  fi
  if ((ok)); then echo "  PASS: $name"; return 0; fi
  echo "  FAILED: $name"; return 1
}

wait_guest_listen() {  # wait_guest_listen JOB: 0 once the guest listens on TCP PORT, 1 if JOB ended first
  guest --timeout 70 "for i in \$(seq 1 300); do ss -Hltn 'sport = :$PORT' | grep -q . && exit 0;
    [ -f /mnt/host/q/$1.rc ] && exit 1; sleep 0.2; done; exit 1"
}
wait_host_listen() {
  local i
  for i in $(seq 1 150); do
    "${NSX[@]}" ss -Hltn "sport = :$PORT" | grep -q . && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

FAILED=0

# run_pair: both directions at $SIZE bytes
run_pair() {
  COMMON=(-p "$PORT" -s "$SIZE" -m "$MTU" -r "$RXD" -n "$ITERS")
  GUEST_ARGS="-d rxe0 -g $GIDX ${COMMON[*]}${CHK:+ $CHK}"
  HOST_CMD=("$PYTHON" "$PP" -d pyroce0 -g 0 --stats "${COMMON[@]}" ${CHK:+"$CHK"})
  # ---------------------------------------------------------------- 1: guest server, pyroce client
  echo
  echo "=== run 1 ($SIZE bytes): guest ibv_rc_pingpong server <- pyroce rc_pingpong.py client"
  start_capture "rc1-$SIZE"
  echo "--- guest ($GUEST_IP, rxe0): ibv_rc_pingpong $GUEST_ARGS"
  JOB="$(guest --bg "ibv_rc_pingpong $GUEST_ARGS")" || die "cannot start the guest server"
  if wait_guest_listen "$JOB" >/dev/null 2>&1; then
    "${NSX[@]}" "${HOST_ENV[@]}" timeout "$TIMEOUT" "${HOST_CMD[@]}" "$GUEST_IP" >"$WORK/pyroce.out" 2>&1
    HRC=$?
  else
    echo "guest server is not listening on TCP $PORT" >"$WORK/pyroce.out"; HRC=2
  fi
  # the server finishes right after the client; if the client failed, it may never (blocked in accept)
  guest --wait "$JOB" --timeout "$( ((HRC == 0)) && echo "$TIMEOUT" || echo 15)" >"$WORK/guest.out" 2>&1
  GRC=$?
  if [[ "$GRC" == 124 ]]; then guest --kill "$JOB" >/dev/null 2>&1; echo "(timed out; killed)" >>"$WORK/guest.out"; fi
  JOB=""
  stop_capture
  sed 's/^/    /' "$WORK/guest.out"; echo "    [exit $GRC]"
  echo "--- pyroce ($HOST_IP, pyroce0): ${HOST_ENV[*]:1} ip netns exec $NS ${HOST_CMD[*]} $GUEST_IP"
  sed 's/^/    /' "$WORK/pyroce.out"; echo "    [exit $HRC]"
  check "$SIZE bytes: guest server / pyroce client" "$GRC" "$WORK/guest.out" "$HRC" "$WORK/pyroce.out" || FAILED=1

  # ---------------------------------------------------------------- 2: pyroce server, guest client
  echo
  echo "=== run 2 ($SIZE bytes): pyroce rc_pingpong.py server <- guest ibv_rc_pingpong client"
  start_capture "rc2-$SIZE"
  "${NSX[@]}" "${HOST_ENV[@]}" timeout "$TIMEOUT" "${HOST_CMD[@]}" >"$WORK/pyroce.out" 2>&1 &
  SERVER_PID=$!
  if wait_host_listen; then
    JOB="$(guest --bg "ibv_rc_pingpong $GUEST_ARGS $HOST_IP")" || die "cannot start the guest client"
    guest --wait "$JOB" --timeout "$TIMEOUT" >"$WORK/guest.out" 2>&1
    GRC=$?
    if [[ "$GRC" == 124 ]]; then guest --kill "$JOB" >/dev/null 2>&1; echo "(timed out; killed)" >>"$WORK/guest.out"; fi
    JOB=""
  else
    echo "pyroce server is not listening on TCP $PORT" >"$WORK/guest.out"; GRC=2
  fi
  # likewise: a server whose client failed may wait for it forever; give it 15 s
  if ((GRC != 0)); then
    for _ in $(seq 1 150); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill "$SERVER_PID" 2>/dev/null && echo "(still waiting 15 s after the client failed; killed)" >>"$WORK/pyroce.out"
  fi
  wait "$SERVER_PID"
  HRC=$?
  SERVER_PID=""
  stop_capture
  echo "--- pyroce ($HOST_IP, pyroce0): ${HOST_ENV[*]:1} ip netns exec $NS ${HOST_CMD[*]}"
  sed 's/^/    /' "$WORK/pyroce.out"; echo "    [exit $HRC]"
  echo "--- guest ($GUEST_IP, rxe0): ibv_rc_pingpong $GUEST_ARGS $HOST_IP"
  sed 's/^/    /' "$WORK/guest.out"; echo "    [exit $GRC]"
  check "$SIZE bytes: pyroce server / guest client" "$GRC" "$WORK/guest.out" "$HRC" "$WORK/pyroce.out" || FAILED=1

}

IFS=, read -ra SIZES <<<"$SIZES_ARG"
for SIZE in "${SIZES[@]}"; do run_pair; done

echo
[[ -n "$CAPTURE" ]] && echo "captures: $CAPTURE/rc1-SIZE.pcap, rc2-SIZE.pcap (decode: pyroce decode FILE)"
if ((FAILED)); then echo "=== rxe interop: FAILED"; exit 1; fi
echo "=== rxe interop: both directions passed at ${SIZES_ARG//,/, } bytes"
exit 0
