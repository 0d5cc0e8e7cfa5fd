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
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

READS = 16
CHUNK = 4096
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def die(msg):
    print(f"resp-resources: FAIL: {msg}", flush=True)
    sys.exit(1)


def gid_index(ctx):
    """The first IPv4-mapped (RoCEv2) GID, else the first non-zero one."""
    best = None
    for i in range(16):
        try:
            g = str(ctx.query_gid(1, i))
        except Exception:
            continue
        if g.replace(":", "").strip("0") == "":
            continue
        if "ffff:" in g:
            return i
        best = i if best is None else best
    return best if best is not None else 0


def resources(dev, qpn):
    out = subprocess.run(["rdma", "res", "show", "qp", "link", dev, "lqpn", str(qpn),
                          "-dd"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"drv_resp_resources (\d+)", out)
    if not m:
        die(f"QP {qpn}: no drv_resp_resources in: {out.strip()!r}")
    return int(m.group(1))


def expect(step, dev, want):
    got = {name: resources(dev, q.qp_num) for name, q in want[0]}
    exp = dict(zip(got, want[1]))
    if got != exp:
        die(f"{step}: drv_resp_resources {got}, want {exp}")
    print(f"resp-resources: {step}: {got}", flush=True)


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
        gi = gid_index(ctx)
        size = 65536
        qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                                 cap=QPCap(max_send_wr=4, max_recv_wr=4)))
               for _ in range(2)]
        for q, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
            a = QPAttr(port_num=1)
            a.qp_access_flags = ACCESS
            a.dest_qp_num = peer.qp_num
            a.path_mtu = e.IBV_MTU_4096
            a.max_dest_rd_atomic = 1
            a.max_rd_atomic = 1
            a.min_rnr_timer = 1
            a.timeout = 14
            a.retry_cnt = 7
            a.rnr_retry = 7
            gr = GlobalRoute(dgid=ctx.query_gid(1, gi), sgid_index=gi)
            a.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr)
            q.to_rts(a)
        src = MR(pd, size, ACCESS)
        dst = MR(pd, size, ACCESS)
        back = MR(pd, size, ACCESS)

        def wait(what):
            end = time.time() + 60
            while True:
                if time.time() > end:
                    die(f"MTU 4096: {what}: no completion in 60 s")
                n, wcs = cq.poll(1)
                if n:
                    if wcs[0].status != e.IBV_WC_SUCCESS:
                        die(f"MTU 4096: {what}: status {wcs[0].status}")
                    return

        data = bytes((i * 29 + 7) & 0xff for i in range(size))
        src.write(data, size)
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, size, src.lkey)])
        wr.set_wr_rdma(dst.rkey, dst.buf)
        qps[0].post_send(wr)
        wait("WRITE")
        if dst.read(size, 0) != data:
            die("MTU 4096: WRITE data differs")
        wr = SendWR(opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(back.buf, size, back.lkey)])
        wr.set_wr_rdma(dst.rkey, dst.buf)
        qps[0].post_send(wr)
        wait("READ")
        if back.read(size, 0) != data:
            die("MTU 4096: READ data differs")
        back.write(bytes(size), size)
        qps[1].post_recv(RecvWR(num_sge=1, sg=[SGE(back.buf, size, back.lkey)]))
        qps[0].post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(src.buf, size, src.lkey)]))
        wait("SEND")
        wait("SEND's receive")
        if back.read(size, 0) != data:
            die("MTU 4096: SEND data differs")
        print(f"resp-resources: path MTU 4096: {size} bytes by WRITE, READ and SEND ok",
              flush=True)
    finally:
        subprocess.run(["ip", "link", "set", netdev, "mtu", "1500"], check=False)
    print("resp-resources: ok", flush=True)


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
    gi = gid_index(ctx)
    port_attr = ctx.query_port(1)

    def mkqp():
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                          cap=QPCap(max_send_wr=READS, max_recv_wr=4))
        return QP(pd, init)

    cli, srv = mkqp(), mkqp()
    both = [("client", cli), ("server", srv)]
    expect("created (RESET)", dev, (both, (0, 0)))

    def attrs(peer, dest_rd):
        a = QPAttr(port_num=1)
        a.qp_access_flags = ACCESS
        a.pkey_index = 0
        a.dest_qp_num = peer.qp_num
        a.path_mtu = e.IBV_MTU_1024
        a.max_dest_rd_atomic = dest_rd
        a.max_rd_atomic = READS
        a.min_rnr_timer = 1
        a.rq_psn = 0
        a.sq_psn = 0
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        gr = GlobalRoute(dgid=ctx.query_gid(1, gi), sgid_index=gi)
        a.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr, dlid=port_attr.lid)
        return a

    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        q.to_init(attrs(peer, rd))
    expect("INIT", dev, (both, (0, 0)))
    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        q.to_rtr(attrs(peer, rd))
    expect("RTR, max_dest_rd_atomic 3 and 16", dev, (both, (4, 16)))
    for q, peer, rd in ((cli, srv, 3), (srv, cli, 16)):
        q.to_rts(attrs(peer, rd))

    src = MR(pd, READS * CHUNK, ACCESS)
    dst = MR(pd, READS * CHUNK, ACCESS)

    def reads(seed):
        data = bytes((i * 13 + seed) & 0xff for i in range(READS * CHUNK))
        dst.write(data, len(data))
        src.write(bytes(len(data)), len(data))
        for i in range(READS):
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                        sg=[SGE(src.buf + i * CHUNK, CHUNK, src.lkey)])
            wr.set_wr_rdma(dst.rkey, dst.buf + i * CHUNK)
            cli.post_send(wr)
        got, end = 0, time.time() + 60
        while got < READS:
            if time.time() > end:
                die(f"{got} of {READS} READs completed in 60 s")
            n, wcs = cq.poll(READS)
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    die(f"READ {wc.wr_id}: status {wc.status}")
            got += n
        if src.read(len(data), 0) != data:
            die("READ data differs")
        print(f"resp-resources: {READS} READs outstanding at once: {len(data)} bytes ok",
              flush=True)

    reads(1)
    reset = QPAttr(qp_state=e.IBV_QPS_RESET)
    srv.modify(reset, e.IBV_QP_STATE)
    srv.to_init(attrs(cli, 1))
    srv.to_rtr(attrs(cli, 1))
    srv.to_rts(attrs(cli, 1))
    expect("server through RESET to RTS with max_dest_rd_atomic 1", dev, (both, (4, 16)))
    # The client's QP is connected to the server's old incarnation: start it over too.
    cli.modify(reset, e.IBV_QP_STATE)
    for step in (cli.to_init, cli.to_rtr, cli.to_rts):
        step(attrs(srv, 3))
    reads(2)
    print("resp-resources: ok", flush=True)


main()
