#!/usr/bin/env python3
"""make demo, part 2: an RC QP on rrxe0 walked RESET -> INIT -> RTR -> RTS through librrxe
(pyverbs over libibverbs), looped back to our own GID, then query_qp printed."""
import glob
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr

DEV = "rrxe0"
ctx = Context(name=DEV)
# The RoCEv2 GID of the netdev's IPv4 address.
gid_index = None
for t in sorted(glob.glob(f"/sys/class/infiniband/{DEV}/ports/1/gid_attrs/types/*")):
    idx = int(t.rsplit("/", 1)[1])
    try:
        kind = open(t).read().strip()
    except OSError:
        continue
    gid = open(f"/sys/class/infiniband/{DEV}/ports/1/gids/{idx}").read().strip()
    if kind == "RoCE v2" and gid.startswith("0000:0000:0000:0000:0000:ffff:"):
        gid_index = idx
        break
assert gid_index is not None, "no RoCEv2 IPv4 GID"

pd = PD(ctx)
cq = CQ(ctx, 16)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                       cap=QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)))
print(f"created RC QP {qp.qp_num} on {DEV} (GID index {gid_index})")

a = QPAttr()
a.qp_state, a.pkey_index, a.port_num = e.IBV_QPS_INIT, 0, 1
a.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
print("RESET -> INIT")

a = QPAttr()
a.qp_state, a.path_mtu, a.dest_qp_num, a.rq_psn = e.IBV_QPS_RTR, e.IBV_MTU_1024, qp.qp_num, 0x1234
a.max_dest_rd_atomic, a.min_rnr_timer = 4, 12
gr = GlobalRoute(dgid=ctx.query_gid(1, gid_index), sgid_index=gid_index)
a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
          | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
print("INIT -> RTR (address resolved in the kernel: our own GID)")

a = QPAttr()
a.qp_state, a.timeout, a.retry_cnt, a.rnr_retry, a.sq_psn, a.max_rd_atomic = e.IBV_QPS_RTS, 14, 7, 7, 0x1234, 4
qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
          | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
print("RTR -> RTS\n")

attr, init = qp.query(0x1FFFFF)
print("### query_qp")
print(attr)
print(init)
