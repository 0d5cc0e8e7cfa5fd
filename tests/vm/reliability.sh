#!/bin/bash
# RC reliability (retransmit timer, go-back-N, READ re-read, duplicate-request replay, implied
# NAK) and interop with rdma_rxe, in a --bare guest. Every step is bounded by a timeout (a hang
# fails its check, never the suite); each prints PASS/FAIL lines, the last line is the summary.
#
#   A  rrxe0 (veth0, init_net) <-> rrxe1 (veth1, netns "peer")            [tests/vm/rel-lib.sh]
#      lossless   rrxe-integrity RC/UC/UD, up to 4 MiB, WRITE/READ bursts, atomic counter
#      faults     netem on both veth ends: loss 1%, loss 10%, delay 1ms reorder 25% 50%,
#                 duplicate 5%, corrupt 2%; under each rrxe-integrity RC only (WRITE, READ,
#                 SEND, atomics; every byte checked, every WR completes once, atomics exactly
#                 once) and the rrxe hw counters before/after: retransmits > 0 under loss,
#                 an ICRC error counter > 0 under corruption (looked up by name: a missing
#                 counter fails)
#      ucloss     UC through 10% loss: messages arrive intact or not at all; the QP keeps
#                 working (rrxe-ucloss)
#      linkdown   link flapped for 300 ms under RC WRITEs: everything completes; a 300 ms
#                 blackhole (netem loss 100%, ports up): everything completes (only the
#                 retransmit timer can do it); link pulled: IBV_WC_RETRY_EXC_ERR within 4 x 4.096 us x 2^timeout x
#                 (retry_cnt + 1) (+ slack), the rest flushed (rrxe-linkdown); link back up:
#                 a fresh ibv_rc_pingpong works
#      inflight   netem slots on veth0 only (at most 2 packets leave per 40 ms slot, 50 per
#                 second, far fewer than the slowest sender makes; netem's delay or rate would
#                 not do: netem orphans an skb it delays that way): one UC QP (ib_write_bw -c UC
#                 8 x 64 KiB, client rrxe0; UC because an RC QP's congestion window, not the
#                 cap, bounds its packets when timeouts under a loaded host keep the window
#                 small) keeps more than 16 and never more than 64 packets in the qdisc
#                 (sampled backlog; without the cap it reaches all 512), the run completes,
#                 and rrxe0's tx_inflight_waits counter moves
#   B  rxe0 (rdma_rxe, veth0, init_net) <-> rrxe1 (veth1, netns "peer")
#      interop    ibv_{rc,uc,ud,srq}_pingpong at 64 B and 16 KiB (UD: the MTU), perftest
#                 ib_{write,read,send,atomic}_bw and ib_write_lat, in both directions (server on
#                 rrxe, client on rxe, then swapped); rrxe-integrity RC/UC/UD across the drivers
#      faults, ucloss, linkdown: as in A (the counters checked are rrxe1's; the requester of
#                 the link-down test is rrxe1)
#
#   scripts/vm-run --bare --timeout 1800 -- $PWD/tests/vm/reliability.sh
#   RRXE_VM_TESTS=reliability tests/vm/run-all
#
# Environment:
#   RRXE_REL_ONLY      subset of: A.lossless A.faults A.ucloss A.linkdown A.inflight B.interop
#                      B.faults B.ucloss B.linkdown (default all)
#   RRXE_REL_SETTINGS  subset of the netem settings: loss1 loss10 reorder dup5 corrupt2
#   RRXE_REL_B         rrxe (default) or rxe: B with rdma_rxe on both ends (rxe0 on veth0, rxe1
#                      on veth1, both in init_net; A is skipped) to validate the harness itself;
#                      the rrxe counter checks are then skipped
#   RRXE_REL_ITERS     pingpong/perftest iterations (20: interop is proven by the exchange, not its length)
#   RRXE_REL_PINGPONG  B.interop's pingpong tools (default "rc uc ud srq"); RRXE_REL_PERFTEST its
#                      perftest tools (default "write_bw read_bw send_bw atomic_bw write_lat"; a
#                      tool named twice runs twice); RRXE_REL_INTEGRITY=0 leaves out its
#                      rrxe-integrity run. To repeat one case: RRXE_REL_ONLY=B.interop
#                      RRXE_REL_PINGPONG= RRXE_REL_PERFTEST="read_bw read_bw ..." RRXE_REL_INTEGRITY=0
#   RRXE_REL_SEED      integrity/ucloss seed (default: from the clock, printed)
#   RRXE_REL_STEP_TIMEOUT  seconds per step (120); RRXE_REL_WC_TIMEOUT seconds per completion
#                      under faults (30)
#   RRXE_REL_REPEAT    runs A.faults and B.faults this many times in one boot (1), to chase a
#                      flake: each integrity run takes a new seed
#   RRXE_REL_PCAP      a directory (the job's /mnt, say): every fault step's RoCE headers on
#                      veth0 (first 128 bytes of each packet, after veth0's netem and before
#                      veth1's) are captured in /tmp and copied there when the step fails or
#                      XFAILs (`scripts/roce-pcap FILE` summarises one)
#   RRXE_REL_XFAIL     check names whose FAIL is a known rdma_rxe 6.12 bug: printed as XFAIL,
#                      not counted. Default: the UC checks with rxe as the receiver (below).
#
# rdma_rxe 6.12 bug (UC receiver never recovers from a lost packet): when the LAST packet of a
# multi-packet UC RDMA WRITE is lost, the next message's FIRST packet reaches check_op_seq()
# with qp->resp.opcode still *_RDMA_WRITE_MIDDLE -> RESPST_ERR_MISSING_OPCODE_LAST_D1E ->
# do_class_d1e_error(), which resets resp.opcode to -1 only when a receive WQE is attached
# (none is for a WRITE) and drops the packet; so every later message is dropped and the QP
# never delivers again (rxe_resp.c). rrxe-ucloss shows it as ucloss.some_delivered and
# ucloss.still_works failing whenever rxe receives.
#
# rdma_rxe 6.12 bug (link down): with the link pulled under RC WRITEs, an rxe requester never
# completes its WRs (no IBV_WC_RETRY_EXC_ERR within 30 s: its retransmissions stall behind
# the skbs it still counts in flight), then ibv_destroy_qp WARNs in __rxe_cleanup ("cleanup
# failed, err = -110") and frees the QP anyway: KASAN reports a use-after-free in
# rxe_skb_tx_dtor when the queued skbs are finally freed (seen with RRXE_REL_B=rxe).
#
# Suspected rdma_rxe 6.12 bug (RC requester under reordering), seen once in a CI run (it
# passed in every other run and in 4 reproductions here): under "delay 1ms reorder 25% 50%", a
# burst of WRITEs and READs posted by rxe0 to rrxe1 ended with rxe0's QP in ERR and its WR 3 (a
# WRITE after a READ) completed WR_FLUSH_ERR, with no error completion before it. Nothing on
# the wire explains that: rrxe1 sent only ACKs, READ responses and sequence NAKs (its counters:
# seq_naks_sent, duplicate_responses, no error NAK sent or received), and an error NAK would
# have completed the WR with its REM_* status first (rxe_comp.c completes the WQE, then calls
# rxe_qp_error()). So rxe moved its QP to ERR through a local path, and rxe's flush_send_queue()
# reports every WQE still queued as WR_FLUSH_ERR, overwriting the status such a path sets
# (rxe_req.c `err:`). The path showed itself in a later CI run and in a clean-clone run on
# 2026-11-26: rdma_rxe WARNs at rxe_comp.c:827, WARN_ON_ONCE(wqe->status == IB_WC_SUCCESS) in
# its COMPST_ERROR state, i.e. rxe_completer failed the WQE through one of check_ack()'s returns
# of COMPST_ERROR that set no status: the opcode-sequence checks (a READ response whose opcode
# does not follow the previous one, as reordering delivers them) or a READ response or atomic
# ACK whose AETH is not an ACK. A reordered response is a reason to drop or retry, not to fail
# the QP. The exact path (read in rxe_comp.c, 6.12): a plain ACK that arrives late (PSN below
# comp.psn: it acknowledged an earlier WRITE and reordering held it back) while rxe is in the
# middle of a multi-packet READ response (comp.opcode READ_RESPONSE_FIRST/MIDDLE) goes
# check_psn() -> COMPST_CHECK_ACK -> COMPST_WRITE_SEND -> COMPST_UPDATE_COMP, which sets
# comp.opcode to -1 (the ACK has RXE_END_MASK) although the ACK is stale; the next READ
# response MIDDLE or LAST then fails check_ack()'s sequence check (comp.opcode -1 needs a start
# opcode) -> COMPST_ERROR with status still SUCCESS -> the WARN, do_complete(), rxe_qp_error().
# Any responder that acknowledges a WRITE before answering a later READ can trigger it through
# a reordering network; a responder could prevent it only by holding back its ACKs.
# Loss and corruption reach the same state without any reordering (a clean-clone run of
# 2026-11-27, B.corrupt2, with the WARN in that step): rxe0 sends WRITE w then READ r; the ACK of
# w is lost and rxe0's timer fires before the READ's response arrives (TCG, timeout 14), so it
# goes back to w and sends w and r again; the first answer of r arrives with a packet lost, and
# rxe0 waits in READ_RESPONSE_MIDDLE for the missing PSN; the responder answers the duplicate w
# with the ACK C9-105 asks for, which (as rdma_rxe's own responder does, its ack_psn skips
# READs) names a PSN below r: stale when it reaches rxe0, so comp.opcode becomes -1; the answer
# to the duplicate r then brings the missing MIDDLE, which fails the sequence check.
# So the signature below is XFAIL in every B fault setting, not only under reordering.
# That WARN is accepted in this suite only (RRXE_VM_KNOWN_SPLATS in tests/vm/run-all);
# any other kernel report still fails the run.
# Only that signature (a burst from rxe0 whose first bad completion is a flush) is XFAIL; any
# other failure of the check still fails.
xfail_sig_stale_ack='burst [0-9]+ rxe0->rrxe1: .*: completion [0-9]+: wr_id [0-9]+ [A-Z_]+ Work Request Flushed Error'
# The same bug when the WQE that rxe_completer fails is the READ itself: COMPST_ERROR
# completes it with the status it still has, SUCCESS (hence the WARN), so rdma_rxe reports a
# READ whose responses never all arrived as done, and the program finds its bytes wrong
# (clean-clone run of 2026-11-29, sixth session, B.loss10: "WR 15 (RDMA_READ 6533 B) slot:
# 4473 of 8640 bytes differ", the WARN in that step). XFAIL only when the kernel's W taint
# (a WARN) appeared during that very program (WARN_ON_ONCE prints once per boot; a later
# occurrence in the same boot fails).
xfail_sig_stale_read='burst [0-9]+ rxe0->rrxe1: .*: WR [0-9]+ \(RDMA_READ [0-9]+ B\) slot: [0-9]+ of [0-9]+ bytes differ'
#
# Fixed (formerly XFAIL): ib_read_bw with rrxe1 as the client and rdma_rxe's rxe0 as the server
# (-o 128, 16 KiB, mtu 1024) ended in IBV_WC_RETRY_EXC_ERR on a uniprocessor guest. perftest
# fixes the ACK timeout at 14 (67 ms); rxe answered a window of 32 READs slower than that, and
# each timeout went back N over the whole window; rxe replays each duplicate READ in full, so
# the response we waited for stayed behind a growing queue of replays until the retries were
# spent. A timeout now probes with the oldest WR only (docs/reliability.md). Reproduce with
# RRXE_VM_SMP=1 and the repeat knobs above: 12 runs, 5 timeouts, 5 retransmits, 5 duplicate
# READs at rxe0 (80 duplicate responses), all passed.
interop_known=""
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/rel-lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RRXE_REL_BIN:-$root/target/release}
T=${RRXE_REL_STEP_TIMEOUT:-120}
WCT=${RRXE_REL_WC_TIMEOUT:-30}
ITERS=${RRXE_REL_ITERS:-20}
BPEER=${RRXE_REL_B:-rrxe}
only=" ${RRXE_REL_ONLY:-A.lossless A.faults A.ucloss A.linkdown A.inflight B.interop B.faults B.ucloss B.linkdown} "
settings=" ${RRXE_REL_SETTINGS:-loss1 loss10 reorder dup5 corrupt2} "
part() { [[ $only == *" $1 "* ]]; }
uc_rxe_bug() { local d; for d in "$@"; do echo "$d.ucloss.some_delivered $d.ucloss.still_works"; done; }
xfail=" ${RRXE_REL_XFAIL-$(uc_rxe_bug B.ucloss.rrxe1_to_rxe0 Brxe.ucloss.rxe0_to_rxe1 Brxe.ucloss.rxe1_to_rxe0) Brxe.linkdown.linkdown.error_completion} "
seed=(); [ -n "${RRXE_REL_SEED:-}" ] && seed=(--seed "$RRXE_REL_SEED")
t0=$(date +%s)
elapsed() { rel_log "$1 done at +$(( $(date +%s) - t0 )) s"; }
modprobe crc32_generic 2>/dev/null

# sub PREFIX CMD...: a program printing PASS/FAIL/INFO lines itself, bounded by $T; its check
# names get "PREFIX." in front; a crash, hang or silent exit is a FAIL of PREFIX.
# (The lines are rewritten and counted by bash itself: the grep/sed pipelines that did it started
# about a dozen processes per program run, each about 0.3 s under TCG with KASAN.)
sub() {
  local pre=$1; shift; local out rc p=0 f=0 xf=0 l x lines=()
  local stale="^FAIL (B\.(reorder|loss1|loss10|dup5|corrupt2)\.integrity\.rc\.two_devices): ($xfail_sig_stale_ack)"
  local sread="^FAIL (B\.(reorder|loss1|loss10|dup5|corrupt2)\.integrity\.rc\.two_devices): ($xfail_sig_stale_read)"
  local w0 w1
  w0=$(( $(< /proc/sys/kernel/tainted) >> 9 & 1 ))
  out=$(timeout -k 5 "$T" "$@" 2>&1); rc=$?
  w1=$(( $(< /proc/sys/kernel/tainted) >> 9 & 1 ))
  while IFS= read -r l; do
    [[ $l =~ ^[0-9]+\ passed,\ [0-9]+\ failed$ ]] && continue
    [[ $l =~ ^(PASS|FAIL|INFO|SKIP)\ (.*)$ ]] && l="${BASH_REMATCH[1]} $pre.${BASH_REMATCH[2]}"
    if [[ $l == "FAIL "* ]]; then
      for x in $xfail; do
        [[ $l == "FAIL $x:"* ]] && { l="XFAIL $x (known rdma_rxe 6.12 bug):${l#"FAIL $x:"}"; break; }
      done
    fi
    if [ -z "${RRXE_REL_XFAIL+set}" ] && [[ $l =~ $stale ]]; then
      l="XFAIL ${BASH_REMATCH[1]} (suspected rdma_rxe 6.12 requester bug: a stale ACK inside a READ response, see the header): ${BASH_REMATCH[3]}${l:${#BASH_REMATCH[0]}}"
    elif [ -z "${RRXE_REL_XFAIL+set}" ] && [ "$w0$w1" = 01 ] && [[ $l =~ $sread ]]; then
      l="XFAIL ${BASH_REMATCH[1]} (rdma_rxe 6.12 requester bug: rxe_comp.c:827 WARNed in this step and completed the READ as SUCCESS, see the header): ${BASH_REMATCH[3]}${l:${#BASH_REMATCH[0]}}"
    fi
    case $l in "PASS "*) p=$((p + 1)) ;; "FAIL "*) f=$((f + 1)) ;; "XFAIL "*) xf=$((xf + 1)) ;; esac
    lines+=("$l")
  done <<< "$out"
  printf '%s\n' "${lines[@]}"
  program_took "$pre"
  PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); XFAILED=$((${XFAILED:-0} + xf))
  if [ $rc = 124 ] || [ $rc = 137 ]; then fail "$pre" "hang: killed after ${T} s"
  elif [ $rc != 0 ] && [ "$f" = 0 ] && [ "$xf" = 0 ]; then fail "$pre" "exit $rc: $(printf '%s\n' "${lines[@]}" | tail -3)"
  elif [ $rc = 0 ] && [ "$p" = 0 ]; then fail "$pre" "no check ran"; fi
}

# listening PREFIX...: whether something listens on $PORT in the namespace PREFIX runs in (init_net
# and "peer" read by bash from /proc: no process per poll)
listening() {
  if [ $# = 0 ]; then tcp_listening "$PORT"
  elif [ "$*" = "ip netns exec peer" ] && peer_sleeper; then tcp_listening "$PORT" "$PEER_SLEEPER"
  else "$@" ss -ltn | grep -q ":$PORT "; fi
}
PORT=18700
# xpair NAME PATTERN SRV GFLAG TOOL ARGS...: TOOL ARGS -d DEV -GFLAG GID -p PORT on device SRV
# (0 or 1) as the server and on the other device as the client (connecting to SRV's address);
# both must exit 0 within $T and the client's output match PATTERN (the server's too, for
# pingpong, GFLAG -g).
xpair() {
  local n=$1 pat=$2 s=$3 gf=$4; shift 4
  local sdev sg sip cdev cg sx=() cx=()
  if [ "$s" = 0 ]; then sdev=$DEV0 sg=$G0 sip=$IP0 cdev=$DEV1 cg=$G1 sx=("${X0[@]}") cx=("${X1[@]}")
  else sdev=$DEV1 sg=$G1 sip=$IP1 cdev=$DEV0 cg=$G0 sx=("${X1[@]}") cx=("${X0[@]}"); fi
  PORT=$((PORT + 1))
  timeout -k 5 "$T" "${sx[@]}" "$@" -d "$sdev" "$gf" "$sg" -p "$PORT" > "/tmp/$n.server" 2>&1 &
  local sp=$!
  if ! wait_for 30 listening "${sx[@]}"; then
    kill "$sp" 2>/dev/null; wait "$sp"
    fail "$n" "server never listened: $(tail -5 "/tmp/$n.server")"; return
  fi
  timeout -k 5 "$T" "${cx[@]}" "$@" -d "$cdev" "$gf" "$cg" -p "$PORT" "$sip" > "/tmp/$n.client" 2>&1
  local crc=$?
  [ $crc != 0 ] && kill "$sp" 2>/dev/null
  wait "$sp"; local src=$?
  local why=""
  [ $crc = 0 ] || why="client exit $crc"
  [ $src = 0 ] || why="$why server exit $src"
  match_lines "$pat" "/tmp/$n.client" 1 > /dev/null || why="$why client output without /$pat/"
  [ "$gf" = -g ] && ! match_lines "$pat" "/tmp/$n.server" 1 > /dev/null && why="$why server output without /$pat/"
  if [ -z "$why" ]; then
    pass "$n"; match_lines "$pat" "/tmp/$n.client" 1 '    '
  elif [[ " $interop_known " == *" $n "* ]]; then
    echo "XFAIL $n (known, see the header: rrxe requester vs rdma_rxe responder at perftest's fixed timeout 14): $why"
  else
    fail "$n" "$why"
    { echo "--- server (${sx[*]} $* -d $sdev)"; grep -v -- '-----' "/tmp/$n.server" | tail -12
      echo "--- client (${cx[*]} $* -d $cdev $sip)"; grep -v -- '-----' "/tmp/$n.client" | tail -12; } | sed 's/^/    /'
  fi
}

# both_dirs NAME PATTERN GFLAG TOOL ARGS...: xpair with the server on DEV1, then on DEV0;
# names get .srv_DEVn. (Running the two at once is slower under TCG, measured.)
both_dirs() {
  local n=$1 pat=$2; shift 2
  xpair "$n.srv_$DEV1" "$pat" 1 "$@"
  xpair "$n.srv_$DEV0" "$pat" 0 "$@"
}

# The device that speaks rrxe (requester of the link-down test); the other one.
rrxe_side() { if is_rrxe "$DEV0" || ! is_rrxe "$DEV1"; then echo 0; else echo 1; fi; }

lossless() {
  # Three integrity runs (RC, UC, UD, up to 4 MiB) in one step: twice the step's hang limit.
  # A clean-clone run on a loaded machine (four guests on two cores) took 83 s for the RC run
  # alone and was killed at 120 s in the UC run, making progress.
  local T=$((T * 2))
  snap before
  sub "$TOPO.lossless" "$bin/rrxe-integrity" --dev "$DEV0" --dev2 "$DEV1" --types rc,uc,ud \
    --ops 40 --ud-ops 40 --max-size $((4 << 20)) --bursts 4 --atomic-counter 64 "${seed[@]}"
  snap after; show_deltas before after
}

# faults: every netem setting in turn, RC only, counters around it.
faults() {
  local ent name spec max ops out r i
  for ent in "${SETTINGS[@]}"; do
    name=${ent%%|*}; spec=${ent#*|}
    [[ $settings == *" $name "* ]] || continue
    local ackt=() maxr=()
    case $TOPO.$name in
      # Under 10% loss with rdma_rxe at one end, every lost tail waits for an ACK timer: at
      # timeout 18 (1.07 s, backing off to 4.3 s) a clean-clone run of 2026-11-28 spent the
      # 120 s step on 37 of rrxe1's timeouts and 49 of rdma_rxe's retries (32 atomics each way
      # and 3 bursts, no error reported). Timeout 14 (67 ms), as `make soak`
      # uses for B loss10.
      B*.loss10) max=65536 ops=30 ackt=(--timeout 14) ;;
      *.loss10) max=65536 ops=30 ;;
      # rdma_rxe's requester gets through reordering a few packets per expiry of its ACK timer
      # (tests/vm/soak.sh, note 1): a 512 KiB READ from rxe0 outlasted the 30 s completion
      # timeout in a clean-clone run. So, as `make soak` does: 64 KiB at most and the ACK
      # timeout perftest uses (14: 67 ms) when rdma_rxe is an end.
      B*.reorder) max=65536 ops=30 ackt=(--timeout 14) ;;
      # It recovers a lost READ response the same way (it drops the responses past the gap,
      # rxe_comp.c check_psn()), and each retry is answered with the rest of the READ at TCG's
      # pace: a 2 MiB READ from rxe0 under 1% loss took 17 retries and 24,596 response packets
      # and outlasted the 30 s completion timeout in a clean-clone run (2026-11-26, seed
      # 0x18ebb3c3edbdb3ab). So under loss and corruption: READs of at most 256 KiB, timeout 14.
      B*.corrupt2) max=$((512 << 10)) ops=30 maxr=(--max-read 262144) ackt=(--timeout 14) ;;
      B*.loss1) max=$((2 << 20)) ops=30 maxr=(--max-read 262144) ackt=(--timeout 14) ;;
      # Duplicates are answered per packet (a repeated request is replayed or re-acknowledged,
      # a repeated response dropped), so the messages' size adds nothing: 512 KiB (512 packets
      # at MTU 1024, about 25 duplicates each at 5%) as for reordering and corruption; 2 MiB
      # took twice as long (A.dup5 66 s, B.dup5 52 s in the clean-clone run of 2026-11-29).
      *.reorder|*.corrupt2|*.dup5) max=$((512 << 10)) ops=30 ;;
      *) max=$((2 << 20)) ops=30 ;;
    esac
    local pre="$TOPO.$name"
    # shellcheck disable=SC2086
    if ! netem_on $spec; then fail "$pre.netem" "tc qdisc ... netem $spec failed"; continue; fi
    rel_log "$pre: netem $spec on veth0 and veth1, RC up to $max B"
    snap before
    local cap="" tpid=""
    if [ -n "${RRXE_REL_PCAP:-}" ]; then
      cap=/tmp/$pre.$(date +%s).pcap
      tcpdump -i veth0 -n -B 16384 -s 128 -w "$cap" udp port 4791 2> /tmp/tcpdump.log &
      tpid=$!
      wait_for 20 grep -q listening /tmp/tcpdump.log || rel_log "tcpdump did not start: $(cat /tmp/tcpdump.log)"
    fi
    local f0=$((FAILED + ${XFAILED:-0}))
    sub "$pre" "$bin/rrxe-integrity" --dev "$DEV0" --dev2 "$DEV1" --types rc --ops "$ops" \
      --max-size "$max" "${maxr[@]}" --bursts 3 --atomic-counter 32 --wc-timeout "$WCT" "${ackt[@]}" \
      "${seed[@]}"
    # Issue 28: ibv_rc_pingpong (500 x 4 KiB, one WR in the send queue) under 1% loss ends,
    # both ways, between two rrxe ends. With rdma_rxe at one end it stops in most runs, on
    # rdma_rxe's requester (docs/reliability.md, "rdma_rxe's requester loses its place in a
    # one-WR send queue"), so topology B does not run it.
    if [ "$TOPO.$name" = A.loss1 ]; then
      both_dirs "$pre.rc_pingpong" "iters in" -g ibv_rc_pingpong -n 500 -s 4096
    fi
    snap after
    if [ -n "$cap" ]; then
      kill "$tpid" 2>/dev/null; wait "$tpid" 2>/dev/null
      if [ $((FAILED + ${XFAILED:-0})) != "$f0" ]; then
        cp "$cap" "$RRXE_REL_PCAP/" && sync && rel_log "$pre: capture kept: $RRXE_REL_PCAP/${cap##*/} ($(tail -n 3 /tmp/tcpdump.log | tr '\n' ' '))"
      fi
      rm -f "$cap"
    fi
    echo "    $(netem_stats)"
    netem_off
    show_deltas before after
    if ! is_rrxe "$DEV0" && ! is_rrxe "$DEV1"; then
      echo "SKIP $pre.counters: no rrxe device in topology $TOPO"
    else
      case $name in
        loss*)
          if r=$(delta "$RETRANS_NAMES" before after); then
            [ "$r" -gt 0 ] && pass "$pre.retransmits" || fail "$pre.retransmits" "retransmit counter +$r under $spec"
          else fail "$pre.retransmits" "no hw counter named any of: $RETRANS_NAMES"; fi ;;
        corrupt*)
          if r=$(delta "$ICRC_NAMES" before after); then
            [ "$r" -gt 0 ] && pass "$pre.icrc_errors" || fail "$pre.icrc_errors" "ICRC error counter +$r under $spec"
          else fail "$pre.icrc_errors" "no hw counter named any of: $ICRC_NAMES"; fi ;;
      esac
    fi
  done
}

ucloss() {
  if ! netem_on loss 10%; then fail "$TOPO.ucloss.netem" "tc failed"; return; fi
  sub "$TOPO.ucloss.${DEV0}_to_$DEV1" "$bin/rrxe-ucloss" --dev "$DEV0" --dev2 "$DEV1" --msgs 160 --expect-loss "${seed[@]}"
  [ "$TOPO" != A ] &&
    sub "$TOPO.ucloss.${DEV1}_to_$DEV0" "$bin/rrxe-ucloss" --dev "$DEV1" --dev2 "$DEV0" --msgs 160 --expect-loss "${seed[@]}"
  echo "    $(netem_stats)"
  netem_off
}

linkdown() {
  local s; s=$(rrxe_side)
  local req=$DEV0 resp=$DEV1; [ "$s" = 1 ] && { req=$DEV1; resp=$DEV0; }
  local down="${NS1[*]} ip link set veth1 down" up="${NS1[*]} ip link set veth1 up"
  # timeout 18 (1.07 s; 8.6 s of retries): the `ip`/`tc` commands that make and end an outage
  # take seconds themselves under TCG with KASAN, so the outage lasts far longer than 300 ms.
  sub "$TOPO.linkflap" "$bin/rrxe-linkdown" --dev "$req" --dev2 "$resp" --timeout 18 --retry-cnt 7 \
    --down-cmd "$down" --up-cmd "$up" --down-ms 300 --deadline 30 "${seed[@]}"
  "${NS1[@]}" ip link set veth1 up
  wait_active 30 "$DEV0" "$DEV1"
  # The same outage with the ports staying up: every packet vanishes for 300 ms (netem loss
  # 100% on both ends), so only the retransmit timer can bring the WRs home.
  local bh_on="${NS0[*]} tc qdisc replace dev veth0 root netem loss 100%; ${NS1[*]} tc qdisc replace dev veth1 root netem loss 100%"
  local bh_off="${NS0[*]} tc qdisc del dev veth0 root; ${NS1[*]} tc qdisc del dev veth1 root"
  sub "$TOPO.blackhole" "$bin/rrxe-linkdown" --dev "$req" --dev2 "$resp" --timeout 18 --retry-cnt 7 \
    --down-cmd "$bh_on" --up-cmd "$bh_off" --down-ms 300 --deadline 30 --name blackhole "${seed[@]}"
  netem_off
  sub "$TOPO.linkdown" "$bin/rrxe-linkdown" --dev "$req" --dev2 "$resp" --timeout 14 --retry-cnt 7 \
    --down-cmd "$down" --deadline 30 "${seed[@]}"
  "${NS1[@]}" ip link set veth1 up
  if wait_active 30 "$DEV0" "$DEV1"; then
    pass "$TOPO.linkdown.ports_active_again"
    G0=$(gid_index "$DEV0"); G1=$(gid_index "$DEV1")
    xpair "$TOPO.linkdown.rc_pingpong_after" "iters in" 1 -g ibv_rc_pingpong -n "$ITERS"
  else
    fail "$TOPO.linkdown.ports_active_again" "$DEV0 $(port_state "$DEV0") / $DEV1 $(port_state "$DEV1")"
  fi
}

# inflight: the per-QP cap on skbs in the network stack (see the header).
inflight() {
  local row='^ *[0-9]+ +[0-9]+ +([0-9]+\.[0-9]+|inf)' mon max w
  if ! "${NS0[@]}" tc qdisc replace dev veth0 root netem slot 40ms 40ms packets 2 limit 100000; then
    fail "$TOPO.inflight.netem" "tc failed"; return
  fi
  rm -f /tmp/inflight.max; echo 0 > /tmp/inflight.max
  # One process per sample (tc; the parse is bash's own), in a loop that runs in the namespace:
  # under TCG with both vCPUs busy-polling, a sampler that forks five processes per sample
  # caught nothing during a whole run (CI, 2026-11-27: "at most 0 packets").
  "${NS0[@]}" bash -c 'm=0; re="backlog [0-9]+[KMG]?b ([0-9]+)p"
    while :; do
      if [[ $(tc -s qdisc show dev veth0) =~ $re ]] && [ "${BASH_REMATCH[1]}" -gt "$m" ]; then
        m=${BASH_REMATCH[1]}; echo "$m" > /tmp/inflight.max
      fi
    done' &
  mon=$!
  snap before
  xpair "$TOPO.inflight.write_bw" "$row" 1 -x ib_write_bw -c UC -n 8 -s 65536 -F
  snap after
  kill "$mon"; wait "$mon" 2>/dev/null
  netem_off
  echo "INFO $TOPO.inflight: counters that moved:"; show_deltas before after
  max=$(cat /tmp/inflight.max)
  echo "    qdisc backlog of veth0 at most $max packets"
  # More than the gauge's wake-up mark (16): the sender outran the slots, so the cap was what
  # stopped it. At most the QP's 64 skbs, and the few packets of perftest's own TCP exchange
  # (its start and its results), which wait in the same slots: 66 was sampled once (2026-11-29,
  # seventh session, a second guest beside it), where a broken cap would show hundreds.
  if [ "$max" -gt 16 ] && [ "$max" -le 68 ]; then pass "$TOPO.inflight.qdisc_backlog_le_64"
  else fail "$TOPO.inflight.qdisc_backlog_le_64" "sampled maximum $max packets (want 17-64, and up to 4 of perftest's TCP)"; fi
  if w=$(delta tx_inflight_waits before after) && [ "$w" -gt 0 ]; then pass "$TOPO.inflight.waits_counted"
  else fail "$TOPO.inflight.waits_counted" "tx_inflight_waits +${w:-?}"; fi
}

interop() {
  local tool sz
  {
    for tool in ${RRXE_REL_PINGPONG-rc uc ud srq}; do
      for sz in 64 16384; do
        local args=(-n "$ITERS" -s "$sz") nm=$sz
        if [ $tool = ud ] && [ $sz -gt 64 ]; then nm=$(active_mtu_bytes); args=(-n "$ITERS" -s "$nm"); fi
        [ $tool = srq ] && args+=(-q 4)
        both_dirs "$TOPO.interop.pingpong.$tool.$nm" "iters in" -g ibv_${tool}_pingpong "${args[@]}"
      done
    done
    local row='^ *[0-9]+ +[0-9]+ +([0-9]+\.[0-9]+|inf)'
    # perftest sets its QP's max_rd_atomic to the PEER's outstanding-reads value (by default
    # the peer device's maximum: 128 on rdma_rxe), which a device with a lower
    # max_qp_init_rd_atom (rrxe: 16) must refuse (EINVAL at RTS): both sides get -o with the
    # smaller of the two devices' limits.
    local outs; outs=$(min_rd_atom)
    snap perftest0
    for tool in ${RRXE_REL_PERFTEST:-write_bw read_bw send_bw atomic_bw write_lat}; do
      local extra=()
      case $tool in write_bw|send_bw) extra=(-s 16384) ;; read_bw) extra=(-s 16384 -o "$outs") ;; atomic_bw) extra=(-o "$outs") ;; esac
      both_dirs "$TOPO.interop.perftest.$tool" "$row" -x ib_$tool -n "$ITERS" -F "${extra[@]}"
    done
    snap perftest1; echo "INFO $TOPO.interop.perftest: counters that moved:"; show_deltas perftest0 perftest1
  }
  [ "${RRXE_REL_INTEGRITY:-1}" = 0 ] && return
  sub "$TOPO.interop" "$bin/rrxe-integrity" --dev "$DEV0" --dev2 "$DEV1" --types rc,uc,ud \
    --ops 100 --ud-ops 40 --bursts 3 --atomic-counter 32 "${seed[@]}"
}
min_rd_atom() {
  local a b
  a=$(ibv_devinfo -v -d "$DEV0" | awk '/max_qp_init_rd_atom:/ { print $2; exit }')
  b=$(ibv_devinfo -v -d "$DEV1" | awk '/max_qp_init_rd_atom:/ { print $2; exit }')
  a=${a:-16}; b=${b:-16}
  echo $(( a < b ? a : b ))
}
active_mtu_bytes() {
  case $(active_mtu "$DEV0") in 256) echo 256 ;; 512) echo 512 ;; 2048) echo 2048 ;; 4096) echo 4096 ;; *) echo 1024 ;; esac
}

# --- A
if [ "$BPEER" != rxe ] && { part A.lossless || part A.faults || part A.ucloss || part A.linkdown || part A.inflight; }; then
  if topo_a; then
    part A.lossless && { lossless; elapsed A.lossless; }
    part A.faults && { for ((rep = 0; rep < ${RRXE_REL_REPEAT:-1}; rep++)); do faults; done; elapsed A.faults; }
    part A.ucloss && { ucloss; elapsed A.ucloss; }
    part A.linkdown && { linkdown; elapsed A.linkdown; }
    part A.inflight && { inflight; elapsed A.inflight; }
  fi
fi
# --- B
if part B.interop || part B.faults || part B.ucloss || part B.linkdown; then
  if topo_b "$BPEER"; then
    part B.interop && { interop; elapsed B.interop; }
    part B.faults && { for ((rep = 0; rep < ${RRXE_REL_REPEAT:-1}; rep++)); do faults; done; elapsed B.faults; }
    part B.ucloss && { ucloss; elapsed B.ucloss; }
    part B.linkdown && { linkdown; elapsed B.linkdown; }
  fi
fi
netem_off
summary
