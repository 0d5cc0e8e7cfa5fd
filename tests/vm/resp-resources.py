#!/usr/bin/python3
# Used by tests/vm/pyverbs.sh (issue 30 §5): a QP's responder resources (the READs and atomics
# it keeps for duplicates, IBTA 9.7.5.1.6) are allocated when a modify sets max_dest_rd_atomic,
# sized as rdma_rxe sizes them (rounded up to a power of two), and kept until the QP is
# destroyed; `rdma resource show qp -dd` shows them as drv_resp_resources. Two RC QPs of DEV
# connected to each other:
#   1. created and in INIT: no resources;
#   2. to RTR with max_dest_rd_atomic 3 (the client) and 16 (the server): 4 and 16;
#   3. 16 READs outstanding at once from the client, every byte checked;
#   4. the server back to RESET and up again with max_dest_rd_atomic 1: still 16;
#   5. 16 READs again.
# With --mtu4096 NETDEV instead: a QP's scratch packet is sized by its MTU (1,088 bytes at the
# default 1024) and grown by the modify that raises the path MTU: NETDEV's MTU goes to 9000
# (the port's active MTU to 4096), a fresh pair connects at path MTU 4096, and 64 KiB of WRITE,
# READ and SEND move in full 4096-byte packets, every byte checked; NETDEV's MTU is restored.
# Prints one line per step and "resp-resources: ok"; exits 1 on the first failure.
import argparse
import re
import subprocess
import sys
import time

import pyverbs.enums as e
import vmverbs
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

READS = 16
CHUNK = 4096
WHO = "resp-resources"


def die(msg):
    print(f"{WHO}: FAIL: {msg}", flush=True)
    sys.exit(1)


def resources(dev, qpn):
    out = subprocess.run(["rdma", "res", "show", "qp", "link", dev, "lqpn", str(qpn),
                          "-dd"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"drv_resp_resources (\d+)", out)
    if not m:
        die(f"QP {qpn}: no drv_resp_resources in: {out.strip()!r}")
    return int(m.group(1))


def expect(step, dev, qps, want):
    got = {name: resources(dev, q.qp_num) for name, q in qps}
    exp = dict(zip(got, want))
    if got != exp:
        die(f"{step}: drv_resp_resources {got}, want {exp}")
    print(f"{WHO}: {step}: {got}", flush=True)


def rc_pair(pd, cq, wr):
    init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                      cap=QPCap(max_send_wr=wr, max_recv_wr=4))
    return QP(pd, init), QP(pd, init)


def post_read(qp, local, remote, off, n, wr_id=0):
    wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                sg=[SGE(local.buf + off, n, local.lkey)])
    wr.set_wr_rdma(remote.rkey, remote.buf + off)
    qp.post_send(wr)


def mtu4096(dev, netdev):
    """Full 4096-byte packets from QPs created at the default MTU and moved to 4096."""
    subprocess.run(["ip", "link", "set", netdev, "mtu", "9000"], check=True)
    try:
        ctx = Context(name=dev)
        end = time.time() + 10
        while ctx.query_port(1).active_mtu != e.IBV_MTU_4096:
            if time.time() > end:
                die(f"{netdev} at MTU 9000: active_mtu {ctx.query_port(1).active_mtu}")
            time.sleep(0.2)
        pd = PD(ctx)
        cq = CQ(ctx, 16)
        gi = vmverbs.gid_index(ctx)
        size = 65536
        a, b = rc_pair(pd, cq, 4)
        for q, peer in ((a, b), (b, a)):
            q.to_rts(vmverbs.rc_attr(ctx, gi, peer, mtu=e.IBV_MTU_4096, dest_rd=1, rd=1))
        src, dst, back = (MR(pd, size, vmverbs.ACCESS) for _ in range(3))
        data = bytes((i * 29 + 7) & 0xff for i in range(size))
        src.write(data, size)
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, size, src.lkey)])
        wr.set_wr_rdma(dst.rkey, dst.buf)
        a.post_send(wr)
        vmverbs.poll(cq, 1, WHO, 60)
        if dst.read(size, 0) != data:
            die("MTU 4096: WRITE data differs")
        post_read(a, back, dst, 0, size)
        vmverbs.poll(cq, 1, WHO, 60)
        if back.read(size, 0) != data:
            die("MTU 4096: READ data differs")
        back.write(bytes(size), size)
        b.post_recv(RecvWR(num_sge=1, sg=[SGE(back.buf, size, back.lkey)]))
        a.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf, size, src.lkey)]))
        vmverbs.poll(cq, 2, WHO, 60)
        if back.read(size, 0) != data:
            die("MTU 4096: SEND data differs")
        print(f"{WHO}: path MTU 4096: {size} bytes by WRITE, READ and SEND ok", flush=True)
    finally:
        subprocess.run(["ip", "link", "set", netdev, "mtu", "1500"], check=False)
    print(f"{WHO}: ok", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--mtu4096", metavar="NETDEV")
    args = ap.parse_args()
    dev = args.dev
    if args.mtu4096:
        mtu4096(dev, args.mtu4096)
        return
    ctx = Context(name=dev)
    pd = PD(ctx)
    cq = CQ(ctx, 4 * READS)
    gi = vmverbs.gid_index(ctx)
    cli, srv = rc_pair(pd, cq, READS)
    both = [("client", cli), ("server", srv)]
    expect("created (RESET)", dev, both, (0, 0))

    def up(q, peer, dest_rd, steps):
        for step in steps:
            getattr(q, step)(vmverbs.rc_attr(ctx, gi, peer, dest_rd=dest_rd, rd=READS))

    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        up(q, peer, rd, ["to_init"])
    expect("INIT", dev, both, (0, 0))
    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        up(q, peer, rd, ["to_rtr"])
    expect("RTR, max_dest_rd_atomic 3 and 16", dev, both, (4, 16))
    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        up(q, peer, rd, ["to_rts"])

    src = MR(pd, READS * CHUNK, vmverbs.ACCESS)
    dst = MR(pd, READS * CHUNK, vmverbs.ACCESS)

    def reads(seed):
        data = bytes((i * 13 + seed) & 0xff for i in range(READS * CHUNK))
        dst.write(data, len(data))
        src.write(bytes(len(data)), len(data))
        for i in range(READS):
            post_read(cli, src, dst, i * CHUNK, CHUNK, wr_id=i)
        vmverbs.poll(cq, READS, WHO, 60)
        if src.read(len(data), 0) != data:
            die("READ data differs")
        print(f"{WHO}: {READS} READs outstanding at once: {len(data)} bytes ok", flush=True)

    reads(1)
    reset = QPAttr(qp_state=e.IBV_QPS_RESET)
    srv.modify(reset, e.IBV_QP_STATE)
    up(srv, cli, 1, ["to_init", "to_rtr", "to_rts"])
    expect("server through RESET to RTS with max_dest_rd_atomic 1", dev, both, (4, 16))
    # The client's QP is connected to the server's old incarnation: start it over too.
    cli.modify(reset, e.IBV_QP_STATE)
    up(cli, srv, 3, ["to_init", "to_rtr", "to_rts"])
    reads(2)
    print(f"{WHO}: ok", flush=True)


main()
