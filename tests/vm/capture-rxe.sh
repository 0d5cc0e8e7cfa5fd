#!/bin/bash
# Captures real rdma_rxe RoCEv2 traffic as golden vectors for kmod/logic/wire.rs and icrc.rs.
#
#   scripts/vm-run --bare -- tests/vm/capture-rxe.sh [tools] [v4] [v6]
#
# (no argument: all three parts).
# Runs in a bare guest (rrxe not loaded, veth0 10.99.0.1 <-> veth1 10.99.0.2 in one namespace).
# Puts the kernel's rdma_rxe on both veth ends (rxe0 on veth0, rxe1 on veth1) and captures
# everything on UDP 4791 that crosses veth0 into /mnt/rxe.pcap (the job directory, kept on the
# host under build/vm-logs/<run>/) while traffic runs between rxe0 and rxe1:
#   - ibv_rc_pingpong / ibv_uc_pingpong / ibv_ud_pingpong (SEND, multi-packet, UD with DETH),
#   - perftest ib_write_bw / ib_read_bw / ib_atomic_bw (WRITE, READ request/response, ATOMIC),
#   - a pyverbs script for what the stock tools never send: SEND/WRITE with immediate, SEND with
#     invalidate, compare-and-swap, zero-length and odd-length payloads (every pad count), PSNs
#     that wrap past 0xffffff, a non-zero traffic class, and the NAKs (PSN sequence error,
#     invalid request, remote access error, remote operational error, RNR), over IPv4 and
#     (link-local) IPv6 GIDs.
# tests/host/vectors/ is distilled from the pcap on the host (see its README).
# Each step is bounded by a timeout; a failing step is reported and the capture continues.
set -u
parts=" ${*:-tools v4 v6} "
want() { [[ $parts == *" $1 "* ]]; }
PY=/usr/bin/python3
out=/mnt
say() { echo "capture-rxe: $*"; }
ok=0; bad=0
run() { # run NAME CMD...: one bounded step
  local n=$1; shift
  timeout -k 5 60 "$@" > "/tmp/$n.log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then ok=$((ok + 1)); say "ok   $n"
  else bad=$((bad + 1)); say "FAIL $n (rc $rc)"; tail -n 15 "/tmp/$n.log" | sed 's/^/    /'; fi
}
wait_for() { local t=$1; shift; local end=$(( $(date +%s) + t )); until "$@" >/dev/null 2>&1; do
  [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.2; done; }
listening() { ss -ltn | grep -q ":$1 "; }
# pair NAME PORT SERVER_CMD... -- CLIENT_CMD...: server in the background, client once it listens
pair() {
  local n=$1 port=$2; shift 2; local srv=() cli=()
  while [ "$1" != -- ]; do srv+=("$1"); shift; done; shift; cli=("$@")
  timeout -k 5 60 "${srv[@]}" > "/tmp/$n-server.log" 2>&1 &
  local sp=$!
  if ! wait_for 20 listening "$port"; then
    bad=$((bad + 1)); say "FAIL $n (server never listened)"; kill "$sp" 2>/dev/null; wait "$sp"
    tail -n 15 "/tmp/$n-server.log" | sed 's/^/    /'; return
  fi
  run "$n" "${cli[@]}"
  wait "$sp"; local src=$?
  [ $src = 0 ] || { say "     $n server rc $src"; tail -n 15 "/tmp/$n-server.log" | sed 's/^/    /'; }
}
# gid_index DEV: the RoCE v2 GID of the netdev's IPv4 address (IPv4-mapped)
gid_index() {
  local dev=$1 t i g
  for t in /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/*; do
    i=${t##*/}
    [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue
    g=$(cat "/sys/class/infiniband/$dev/ports/1/gids/$i")
    case "$g" in 0000:0000:0000:0000:0000:ffff:*) echo "$i"; return 0 ;; esac
  done
  return 1
}

say "kernel $(uname -r)"
modprobe crc32_generic 2>/dev/null
modprobe rdma_rxe || { say "no rdma_rxe"; exit 1; }
# Both veth ends live in one namespace: without accept_local, packets (and ARP) whose source is
# one of our own addresses are dropped on receipt.
for k in all default veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.accept_local=1"; done
for k in all veth0 veth1; do sysctl -qw "net.ipv4.conf.$k.rp_filter=0"; done
rdma link add rxe0 type rxe netdev veth0 || { say "rdma link add rxe0 failed"; exit 1; }
rdma link add rxe1 type rxe netdev veth1 || { say "rdma link add rxe1 failed"; exit 1; }
wait_for 20 gid_index rxe0 && wait_for 20 gid_index rxe1 || { say "no RoCE v2 IPv4 GIDs"; exit 1; }
g0=$(gid_index rxe0); g1=$(gid_index rxe1)
say "rxe0 GID[$g0] rxe1 GID[$g1] (IPv4)"
ibv_devinfo -d rxe0 | grep -E 'active_mtu|state:'
ip -br addr

tcpdump -i veth0 -U -n -w "$out/rxe.pcap" udp port 4791 2> /tmp/tcpdump.log &
tdp=$!
wait_for 20 grep -q listening /tmp/tcpdump.log || { say "tcpdump did not start"; cat /tmp/tcpdump.log; }

if want tools; then
# Stock tools. Pingpong and perftest exchange QP data over TCP on loopback.
pair rc_pingpong 18515 ibv_rc_pingpong -d rxe0 -g "$g0" -n 5 -s 4096 -p 18515 \
  -- ibv_rc_pingpong -d rxe1 -g "$g1" -n 5 -s 4096 -p 18515 127.0.0.1
pair uc_pingpong 18516 ibv_uc_pingpong -d rxe0 -g "$g0" -n 5 -s 4096 -p 18516 \
  -- ibv_uc_pingpong -d rxe1 -g "$g1" -n 5 -s 4096 -p 18516 127.0.0.1
pair ud_pingpong 18517 ibv_ud_pingpong -d rxe0 -g "$g0" -n 5 -s 512 -p 18517 \
  -- ibv_ud_pingpong -d rxe1 -g "$g1" -n 5 -s 512 -p 18517 127.0.0.1
pair write_bw 18520 ib_write_bw -d rxe0 -x "$g0" -n 5 -s 8192 -F -p 18520 \
  -- ib_write_bw -d rxe1 -x "$g1" -n 5 -s 8192 -F -p 18520 127.0.0.1
pair read_bw 18521 ib_read_bw -d rxe0 -x "$g0" -n 5 -s 8192 -F -p 18521 \
  -- ib_read_bw -d rxe1 -x "$g1" -n 5 -s 8192 -F -p 18521 127.0.0.1
pair atomic_bw 18522 ib_atomic_bw -d rxe0 -x "$g0" -n 5 -F -p 18522 \
  -- ib_atomic_bw -d rxe1 -x "$g1" -n 5 -F -p 18522 127.0.0.1
pair atomic_cs_bw 18523 ib_atomic_bw -d rxe0 -x "$g0" -n 5 -A CMP_AND_SWAP -F -p 18523 \
  -- ib_atomic_bw -d rxe1 -x "$g1" -n 5 -A CMP_AND_SWAP -F -p 18523 127.0.0.1
fi

# What the stock tools never send.
cat > /tmp/verbs.py <<'EOF'
import glob, sys, time
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

FAM = sys.argv[1]
RC, UC, UD = e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD
ACC = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
       | e.IBV_ACCESS_REMOTE_ATOMIC)
QKEY = 0x11111111


def gid_index(dev):
    paths = glob.glob(f"/sys/class/infiniband/{dev}/ports/1/gid_attrs/types/*")
    for t in sorted(paths, key=lambda p: int(p.rsplit("/", 1)[1])):
        idx = int(t.rsplit("/", 1)[1])
        try:
            kind = open(t).read().strip()
        except OSError:
            continue
        gid = open(f"/sys/class/infiniband/{dev}/ports/1/gids/{idx}").read().strip()
        if kind == "RoCE v2" and (
                (FAM == "v4" and gid.startswith("0000:0000:0000:0000:0000:ffff:"))
                or (FAM == "v6" and gid.startswith("fe80:"))):
            return idx
    raise SystemExit(f"no RoCE v2 {FAM} GID on {dev}")


class Dev:
    def __init__(self, name):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 512)
        self.gidx = gid_index(name)
        self.gid = self.ctx.query_gid(1, self.gidx)
        self.mr = MR(self.pd, 1 << 16, ACC)
        self.mr.write(bytes(range(256)) * 256, 1 << 16)

    def qp(self, qpt):
        cap = QPCap(max_send_wr=64, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        return QP(self.pd, QPInitAttr(qp_type=qpt, scq=self.cq, rcq=self.cq, cap=cap))


def up(d, qp, peer, peer_qpn, qpt, sq_psn, rq_psn, tclass=0, flow=0, rnr_retry=7,
       min_rnr_timer=1, retry_cnt=7, timeout=14, access=None):
    a = QPAttr()
    a.qp_state, a.pkey_index, a.port_num = e.IBV_QPS_INIT, 0, 1
    mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
    if qpt == UD:
        a.qkey = QKEY
        mask |= e.IBV_QP_QKEY
    else:
        a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE
        if qpt == RC:
            a.qp_access_flags = ACC & ~e.IBV_ACCESS_LOCAL_WRITE
        if access is not None:
            a.qp_access_flags = access
        mask |= e.IBV_QP_ACCESS_FLAGS
    qp.modify(a, mask)
    a = QPAttr()
    a.qp_state = e.IBV_QPS_RTR
    mask = e.IBV_QP_STATE
    if qpt != UD:
        a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_MTU_1024, peer_qpn, rq_psn
        gr = GlobalRoute(dgid=peer.gid, sgid_index=d.gidx, hop_limit=64, traffic_class=tclass,
                         flow_label=flow)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
        mask |= e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
    if qpt == RC:
        a.max_dest_rd_atomic, a.min_rnr_timer = 4, min_rnr_timer
        mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
    qp.modify(a, mask)
    a = QPAttr()
    a.qp_state, a.sq_psn = e.IBV_QPS_RTS, sq_psn
    mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
    if qpt == RC:
        a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic = timeout, retry_cnt, rnr_retry, 4
        mask |= (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                 | e.IBV_QP_MAX_QP_RD_ATOMIC)
    qp.modify(a, mask)


class Pair:
    """QP a on device A talks to QP b on device B."""

    def __init__(self, A, B, qpt, a_psn, b_psn, b_expects=None, a_kw=None, b_kw=None):
        self.A, self.B, self.qpt = A, B, qpt
        self.a, self.b = A.qp(qpt), B.qp(qpt)
        up(A, self.a, B, self.b.qp_num, qpt, a_psn, b_psn, **(a_kw or {}))
        up(B, self.b, A, self.a.qp_num, qpt, b_psn,
           a_psn if b_expects is None else b_expects, **(b_kw or {}))
        if qpt == UD:
            gr = GlobalRoute(dgid=B.gid, sgid_index=A.gidx, hop_limit=64)
            self.ah_ab = AH(A.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
            gr = GlobalRoute(dgid=A.gid, sgid_index=B.gidx, hop_limit=64)
            self.ah_ba = AH(B.pd, attr=AHAttr(gr=gr, is_global=1, port_num=1))
        print(f"pair {['RC', 'UC', 'UD'][[RC, UC, UD].index(qpt)]}: A qpn {self.a.qp_num} "
              f"psn {a_psn:#x}, B qpn {self.b.qp_num} psn {b_psn:#x}", flush=True)


def recv(d, qp, off, length, n=1):
    for _ in range(n):
        qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(d.mr.buf + off, length, d.mr.lkey)]))


def send(p, opcode, length, off=0, imm=0, remote=None, atomic=None, reverse=False):
    d, qp, peer = (p.B, p.b, p.A) if reverse else (p.A, p.a, p.B)
    wr = SendWR(wr_id=1, opcode=opcode, num_sge=1, sg=[SGE(d.mr.buf + off, length, d.mr.lkey)],
                send_flags=e.IBV_SEND_SIGNALED, imm_data=imm)
    if remote is not None:
        wr.set_wr_rdma(remote[1] if len(remote) > 1 else peer.mr.rkey, peer.mr.buf + remote[0])
    if atomic is not None:
        wr.set_wr_atomic(peer.mr.rkey, peer.mr.buf + atomic[0], atomic[1], atomic[2])
    if p.qpt == UD:
        wr.set_wr_ud(p.ah_ba if reverse else p.ah_ab, peer_qpn(p, reverse), QKEY)
    qp.post_send(wr)


def peer_qpn(p, reverse):
    return p.a.qp_num if reverse else p.b.qp_num


def poll(d, n, secs=15):
    got, end = [], time.time() + secs
    while len(got) < n and time.time() < end:
        k, wcs = d.cq.poll(n - len(got))
        if k:
            got += wcs[:k]
        else:
            time.sleep(0.002)
    return [(w.status, w.opcode, w.byte_len) for w in got]


def step(label, p, *args, recv_at_peer=0, **kw):
    send(p, *args, **kw)
    a = poll(p.B if kw.get("reverse") else p.A, 1)
    b = poll(p.A if kw.get("reverse") else p.B, recv_at_peer) if recv_at_peer else []
    print(f"{label}: sender {a} receiver {b}", flush=True)


A, B = Dev("rxe0"), Dev("rxe1")

# RC: every pad count, PSN wrap, immediates, RDMA, atomics, both directions; DSCP/ECN set.
p = Pair(A, B, RC, 0xfffffd, 0x123456, a_kw={"tclass": 0x6a}, b_kw={"tclass": 0x6a})
recv(B, p.b, 0, 4096, 8)
recv(A, p.a, 0, 4096, 2)
step("rc send 0", p, e.IBV_WR_SEND, 0, recv_at_peer=1)
step("rc send 13", p, e.IBV_WR_SEND, 13, recv_at_peer=1)
step("rc send_imm 2", p, e.IBV_WR_SEND_WITH_IMM, 2, imm=0x11223344, recv_at_peer=1)
step("rc send_imm 2501", p, e.IBV_WR_SEND_WITH_IMM, 2501, imm=0x55667788, recv_at_peer=1)
if FAM == "v4":
    step("rc write 1", p, e.IBV_WR_RDMA_WRITE, 1, remote=(100,))
    step("rc write 3000", p, e.IBV_WR_RDMA_WRITE, 3000, remote=(4096,))
    step("rc write_imm 5", p, e.IBV_WR_RDMA_WRITE_WITH_IMM, 5, imm=0x0badcafe, remote=(8192,),
         recv_at_peer=1)
    step("rc write_imm 2100", p, e.IBV_WR_RDMA_WRITE_WITH_IMM, 2100, imm=0xfeedf00d,
         remote=(12288,), recv_at_peer=1)
    step("rc read 7", p, e.IBV_WR_RDMA_READ, 7, off=16384, remote=(3,))
    step("rc read 3000", p, e.IBV_WR_RDMA_READ, 3000, off=20480, remote=(0,))
    step("rc cmp_swap", p, e.IBV_WR_ATOMIC_CMP_AND_SWP, 8, off=24576,
         atomic=(32768, 0x0001020304050607, 0xa5a5a5a5a5a5a5a5))
    step("rc fetch_add", p, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, off=24584,
         atomic=(32768, 0x1122334455667788, 0))
    step("rc reverse send 100", p, e.IBV_WR_SEND, 100, reverse=True, recv_at_peer=1)
else:
    step("rc write 1500", p, e.IBV_WR_RDMA_WRITE, 1500, remote=(4096,))
    step("rc read 99", p, e.IBV_WR_RDMA_READ, 99, off=16384, remote=(0,))
    step("rc fetch_add", p, e.IBV_WR_ATOMIC_FETCH_AND_ADD, 8, off=24584, atomic=(32768, 5, 0))

# UD: DETH, with and without immediate, both directions.
p = Pair(A, B, UD, 0x000100, 0x000200)
recv(B, p.b, 0, 2048, 4)
recv(A, p.a, 0, 2048, 2)
step("ud send 100", p, e.IBV_WR_SEND, 100, recv_at_peer=1)
step("ud send_imm 33", p, e.IBV_WR_SEND_WITH_IMM, 33, imm=0xdeadbeef, recv_at_peer=1)
step("ud reverse send 1000", p, e.IBV_WR_SEND, 1000, reverse=True, recv_at_peer=1)

if FAM == "v4":
    # UC: sends and writes, single and multi-packet, with and without immediate.
    p = Pair(A, B, UC, 0xfffffe, 0x654321)
    recv(B, p.b, 0, 4096, 8)
    step("uc send 5", p, e.IBV_WR_SEND, 5, recv_at_peer=1)
    step("uc send 2500", p, e.IBV_WR_SEND, 2500, recv_at_peer=1)
    step("uc send_imm 10", p, e.IBV_WR_SEND_WITH_IMM, 10, imm=0x01020304, recv_at_peer=1)
    step("uc send_imm 1030", p, e.IBV_WR_SEND_WITH_IMM, 1030, imm=0x05060708, recv_at_peer=1)
    step("uc write 3000", p, e.IBV_WR_RDMA_WRITE, 3000, remote=(4096,))
    step("uc write 6", p, e.IBV_WR_RDMA_WRITE, 6, remote=(4096,))
    step("uc write_imm 4", p, e.IBV_WR_RDMA_WRITE_WITH_IMM, 4, imm=0x0a0b0c0d, remote=(8192,),
         recv_at_peer=1)
    step("uc write_imm 1500", p, e.IBV_WR_RDMA_WRITE_WITH_IMM, 1500, imm=0x0e0f1011,
         remote=(8192,), recv_at_peer=1)

    # NAK: remote access error (bad rkey).
    p = Pair(A, B, RC, 0x000010, 0x000020)
    step("rc write bad rkey", p, e.IBV_WR_RDMA_WRITE, 64, remote=(0, 0x00dead00))
    # NAK for a SEND longer than the receive buffer (rxe 6.12: remote operational error).
    p = Pair(A, B, RC, 0x000030, 0x000040)
    recv(B, p.b, 0, 16)
    step("rc send too long", p, e.IBV_WR_SEND, 64, recv_at_peer=1)
    # RNR NAK: no receive posted; one retry, then the requester gives up.
    p = Pair(A, B, RC, 0x000050, 0x000060, a_kw={"rnr_retry": 1}, b_kw={"min_rnr_timer": 3})
    step("rc send rnr", p, e.IBV_WR_SEND, 64)
    # SEND with invalidate of an rkey that does not exist (the responder fails the receive):
    # one packet, then three.
    p = Pair(A, B, RC, 0x000080, 0x000090)
    recv(B, p.b, 0, 4096)
    step("rc send_inv 31", p, e.IBV_WR_SEND_WITH_INV, 31, imm=0x00beef00, recv_at_peer=1)
    p = Pair(A, B, RC, 0x0000a0, 0x0000b0)
    recv(B, p.b, 0, 4096)
    step("rc send_inv 2070", p, e.IBV_WR_SEND_WITH_INV, 2070, imm=0x00beef00, recv_at_peer=1)
    # NAK: invalid request (an RDMA READ to a QP that does not allow remote reads).
    p = Pair(A, B, RC, 0x0000c0, 0x0000d0, b_kw={"access": e.IBV_ACCESS_REMOTE_WRITE})
    step("rc read unsupported", p, e.IBV_WR_RDMA_READ, 16, off=16384, remote=(0,))
    # NAK: PSN sequence error (the responder expects an earlier PSN than the requester sends).
    p = Pair(A, B, RC, 0x000400, 0x000070, b_expects=0x000300,
             a_kw={"retry_cnt": 1, "timeout": 10})
    recv(B, p.b, 0, 4096)
    step("rc send psn gap", p, e.IBV_WR_SEND, 64, recv_at_peer=0)
print("done", flush=True)
EOF
want v4 && run verbs_v4 "$PY" /tmp/verbs.py v4
# IPv6 over the link-local RoCE v2 GIDs (fe80::, which rxe adds for every netdev). Global
# IPv6 addresses on both veth ends of one namespace do not work: rxe's packets never leave.
want v6 && run verbs_v6 "$PY" /tmp/verbs.py v6

sleep 1
kill -INT "$tdp"; wait "$tdp"
cat /tmp/tcpdump.log
for f in /tmp/*.log; do echo "=== ${f##*/}"; cat "$f"; done > "$out/capture-logs.txt"
say "$(tcpdump -r "$out/rxe.pcap" 2>/dev/null | wc -l) packets in $out/rxe.pcap ($(stat -c %s "$out/rxe.pcap") bytes)"
rdma link delete rxe1; rdma link delete rxe0
say "$ok steps ok, $bad failed"
exit "$bad"
