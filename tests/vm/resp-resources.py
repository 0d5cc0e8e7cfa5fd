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
from pyverbs.wr import SGE, SendWR

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    dev = ap.parse_args().dev
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
