#!/bin/bash
# rxe_interop.sh - ibv_{rc,uc,srq,ud}_pingpong interop between pyroce and Linux rxe (soft-RoCE in a VM).
#
# Boots the rxevm guest (../shared/rxevm, see its README: Debian kernel 6.1 rdma_rxe + rdma-core 44,
# reached over a tap inside network namespace 'rxevm'), then runs each of rdma-core's
# ibv_rc_pingpong, ibv_uc_pingpong, ibv_srq_pingpong and ibv_ud_pingpong against pyroce's tool of the same name
# (tools/TOOL.py, a wrapper of `pyroce TOOL`) both ways:
#   1. guest server  `ibv_TOOL -d rxe0 -g 1 ...`           <- pyroce client (host side, 10.77.0.1)
#   2. pyroce server `tools/TOOL.py ...` (10.77.0.1)      <- guest client `ibv_TOOL ... 10.77.0.1`
# at each size (ud: at each of its sizes, which a UD message's one packet must fit: -S), with pyroce's default settings (ICRC checking on). It prints both sides' output,
# checks that each side's "remote address" lines are the other's "local address" lines and that
# pyroce counted no ICRC error, prints PASS or FAILED per pair and a summary line, and exits 0 only
# if every run passed on both sides (1 if a run failed, 2 on a setup error). A guest process of a
# failed run is killed. The VM is shut down at the end unless it was already running or
# --keep-vm is given.
#
# Run it as root (qemu, netns, tap) from anywhere:
#   tools/rxe_interop.sh                       # 1000 iterations of 1, 4096 and 65536 bytes each way, MTU 1024
#   tools/rxe_interop.sh -t uc -n 200 -s 4096 -c   # one tool, one size; -c makes both tools validate the buffer
#   tools/rxe_interop.sh --capture /tmp/cap    # also write TOOL1-SIZE.pcap / TOOL2-SIZE.pcap (tcpdump on the tap)
#
# Options: -t TOOLS (rc,uc,srq,ud)  -n ITERS (1000)  -s SIZES (1,4096,65536)  -S UD_SIZES (1,1024)
#   -m MTU (1024)  -r RX_DEPTH (500)
#   -q NUM_QP (srq_pingpong's QPs, 16)  -p TCP_PORT (18515)
#   -g GUEST_GID_IDX (1 = ::ffff:10.77.0.2, rxe0's RoCEv2/IPv4 GID)  -c (validate buffers)
#   --capture DIR   --keep-vm (leave the guest running)   --timeout S (per run, 300)
#   --vm-mtu M (tap/eth0 MTU for a new guest: 1500 -> rxe active_mtu 1024, 9000 -> 4096)
# Environment: RXEVM (path of the rxevm kit, default <repo>/../shared/rxevm), PYTHON (python3),
#   RXEVM_DIR / RXEVM_NS / RXEVM_NET as in the kit. Needs pyroce's dependencies (pip install -e .) for PYTHON.
# Not part of CI: it needs root, qemu and ~7 minutes at -n 300 (18 runs; build.sh is idempotent; a boot is ~15 s).
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

TOOLS_ARG=rc,uc,srq,ud; ITERS=1000; SIZES_ARG=1,4096,65536; UD_SIZES_ARG=1,1024; MTU=1024; RXD=500; NQP=16; PORT=18515; GIDX=1; CHK=""
CAPTURE=""; KEEP=0; TIMEOUT=300; VM_MTU=1500
usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case "$1" in
    -t) TOOLS_ARG="$2"; shift 2;;
    -n) ITERS="$2"; shift 2;;
    -s) SIZES_ARG="$2"; shift 2;;
    -S) UD_SIZES_ARG="$2"; shift 2;;
    -m) MTU="$2"; shift 2;;
    -r) RXD="$2"; shift 2;;
    -q) NQP="$2"; shift 2;;
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
IFS=, read -ra TOOLS <<<"$TOOLS_ARG"
for T in "${TOOLS[@]}"; do
  [[ "$T" == rc || "$T" == uc || "$T" == srq || "$T" == ud ]] || die "unknown tool '$T' in -t (rc, uc, srq, ud)"
done
[[ $EUID -eq 0 ]] || die "must run as root (qemu, network namespace, tap)"
[[ -x "$RXEVM/up.sh" ]] || die "rxevm kit not found at $RXEVM (set RXEVM)"
RXEVM="$(cd "$RXEVM" && pwd)"
RXEVM_DIR="${RXEVM_DIR:-/var/tmp/rxevm}"
export RXEVM_DIR RXEVM_NS="$NS"
NSX=(ip netns exec "$NS")
HOST_ENV=(env PYROCE_ADDR="$HOST_IP")  # default settings: ICRC checking on
WORK="$(mktemp -d /tmp/rxe_interop.XXXXXX)"

STARTED_VM=0
TCPDUMP_PID=""
SERVER_PID=""
JOB=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill "$SERVER_PID" 2>/dev/null; fi
  # a guest job still running (the script was interrupted, or a run failed): stop it, so no
  # ibv_*_pingpong is left behind in the guest
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
guest --timeout 60 'command -v ibv_rc_pingpong ibv_uc_pingpong ibv_srq_pingpong ibv_ud_pingpong >/dev/null && rdma link show rxe0/1' \
  | sed 's/^/  /' || die "the guest has no rxe0 or lacks a pingpong tool"

# address parts of the "  local address:  LID ..." / "  remote address: LID ..." lines (srq: one per QP;
# ud_pingpong prints "PSN 0x...: GID" on its local line, ", GID" on its remote one)
addr_of() { sed -n "s/^ *$1 address: *//p" "$2" | sed 's/: GID/, GID/'; }

# check NAME GUEST_RC GUEST_OUT HOST_RC HOST_OUT: prints the verdict, returns 0 if the run passed
check() {
  local name="$1" grc="$2" gout="$3" hrc="$4" hout="$5" ok=1 f
  [[ "$grc" == 0 ]] || { echo "  FAIL: guest ibv_$TOOL exited $grc"; ok=0; }
  [[ "$hrc" == 0 ]] || { echo "  FAIL: pyroce $TOOL.py exited $hrc"; ok=0; }
  for f in "$gout" "$hout"; do
    grep -q "^$ITERS iters in " "$f" || { echo "  FAIL: no '$ITERS iters in' line from $(basename "$f" .out)"; ok=0; }
    if grep -q 'invalid data' "$f"; then echo "  FAIL: $(basename "$f" .out) found invalid data"; ok=0; fi
  done
  grep -q "icrc_errors 0," "$hout" || { echo "  FAIL: pyroce counted ICRC errors (or printed no counters)"; ok=0; }
  if [[ "$(addr_of local "$gout")" != "$(addr_of remote "$hout")" || -z "$(addr_of local "$gout")" ]] \
     || [[ "$(addr_of local "$hout")" != "$(addr_of remote "$gout")" || -z "$(addr_of local "$hout")" ]]; then
    echo "  FAIL: the local/remote address lines of the two sides do not match"; ok=0
  fi
  if ((ok)); then echo "  PASS: $name"; PASSED+=("$name"); return 0; fi
  echo "  FAILED: $name"; FAILURES+=("$name"); return 1
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

PASSED=(); FAILURES=()

# run_pair: both directions of ibv_$TOOL at $SIZE bytes
run_pair() {
  COMMON=(-p "$PORT" -s "$SIZE" -r "$RXD" -n "$ITERS")
  [[ "$TOOL" == ud_pingpong ]] || COMMON+=(-m "$MTU")  # ud_pingpong has no -m (nor -c)
  [[ "$TOOL" == srq_pingpong ]] && COMMON+=(-q "$NQP")
  local chk="$CHK"
  [[ "$TOOL" == ud_pingpong ]] && chk=""
  GUEST_ARGS="-d rxe0 -g $GIDX ${COMMON[*]}${chk:+ $chk}"
  HOST_CMD=("$PYTHON" "$REPO/tools/$TOOL.py" -d pyroce0 -g 0 --stats "${COMMON[@]}" ${chk:+"$chk"})
  local short="${TOOL%_pingpong}"
  # ---------------------------------------------------------------- 1: guest server, pyroce client
  echo
  echo "=== $short run 1 ($SIZE bytes): guest ibv_$TOOL server <- pyroce $TOOL.py client"
  start_capture "${short}1-$SIZE"
  echo "--- guest ($GUEST_IP, rxe0): ibv_$TOOL $GUEST_ARGS"
  JOB="$(guest --bg "ibv_$TOOL $GUEST_ARGS")" || die "cannot start the guest server"
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
  check "$short $SIZE bytes: guest server / pyroce client" "$GRC" "$WORK/guest.out" "$HRC" "$WORK/pyroce.out"

  # ---------------------------------------------------------------- 2: pyroce server, guest client
  echo
  echo "=== $short run 2 ($SIZE bytes): pyroce $TOOL.py server <- guest ibv_$TOOL client"
  start_capture "${short}2-$SIZE"
  "${NSX[@]}" "${HOST_ENV[@]}" timeout "$TIMEOUT" "${HOST_CMD[@]}" >"$WORK/pyroce.out" 2>&1 &
  SERVER_PID=$!
  if wait_host_listen; then
    JOB="$(guest --bg "ibv_$TOOL $GUEST_ARGS $HOST_IP")" || die "cannot start the guest client"
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
  echo "--- guest ($GUEST_IP, rxe0): ibv_$TOOL $GUEST_ARGS $HOST_IP"
  sed 's/^/    /' "$WORK/guest.out"; echo "    [exit $GRC]"
  check "$short $SIZE bytes: pyroce server / guest client" "$GRC" "$WORK/guest.out" "$HRC" "$WORK/pyroce.out"
}

for T in "${TOOLS[@]}"; do
  TOOL="${T}_pingpong"
  if [[ "$T" == ud ]]; then IFS=, read -ra SIZES <<<"$UD_SIZES_ARG"; else IFS=, read -ra SIZES <<<"$SIZES_ARG"; fi
  for SIZE in "${SIZES[@]}"; do run_pair; done
done

echo
[[ -n "$CAPTURE" ]] && echo "captures: $CAPTURE/TOOL1-SIZE.pcap, TOOL2-SIZE.pcap (decode: pyroce decode FILE)"
echo "=== results"
for name in "${PASSED[@]}"; do echo "  passed: $name"; done
for name in "${FAILURES[@]}"; do echo "  failed: $name"; done
SUMMARY="${#PASSED[@]} passed, ${#FAILURES[@]} failed (${TOOLS_ARG//,/, } pingpong at ${SIZES_ARG//,/, } bytes (ud: ${UD_SIZES_ARG//,/, }), both directions, -n $ITERS)"
if ((${#FAILURES[@]})); then echo "=== rxe interop: FAILED: $SUMMARY"; exit 1; fi
echo "=== rxe interop: $SUMMARY"
exit 0
