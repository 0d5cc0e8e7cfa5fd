# Helpers shared by the guest's pyverbs scripts (odp-invalidate.py, resp-resources.py): the
# RoCEv2 GID to connect with, the attributes that connect an RC QP to a peer on the same
# device, and polling for successful completions.
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.qp import QPAttr

ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


def gid_index(ctx):
    """The first IPv4-mapped (RoCEv2) GID of port 1, else the first non-zero one."""
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


def rc_attr(ctx, gi, peer, mtu=e.IBV_MTU_1024, dest_rd=4, rd=4, access=ACCESS):
    """QPAttr taking an RC QP through INIT, RTR and RTS to `peer` on the same port."""
    a = QPAttr(port_num=1)
    a.qp_access_flags = access
    a.pkey_index = 0
    a.dest_qp_num = peer.qp_num
    a.path_mtu = mtu
    a.max_dest_rd_atomic = dest_rd
    a.max_rd_atomic = rd
    a.min_rnr_timer = 1
    a.rq_psn = 0
    a.sq_psn = 0
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    gr = GlobalRoute(dgid=ctx.query_gid(1, gi), sgid_index=gi)
    a.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr, dlid=ctx.query_port(1).lid)
    return a


def poll(cq, n, who, timeout=30.0):
    """`n` successful completions from `cq`; exits with "`who`: ..." on an error or timeout."""
    end = time.time() + timeout
    got = []
    while len(got) < n:
        if time.time() > end:
            sys.exit(f"{who}: timed out waiting for {n} completions (got {len(got)})")
        nc, wcs = cq.poll(n - len(got))
        for wc in wcs[:nc]:
            if wc.status != e.IBV_WC_SUCCESS:
                sys.exit(f"{who}: completion {wc.wr_id} status {wc.status} opcode {wc.opcode}")
            got.append(wc)
    return got
