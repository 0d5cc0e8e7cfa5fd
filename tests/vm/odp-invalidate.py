#!/usr/bin/python3
# Used by tests/vm/pyverbs.sh (issue 27, docs/odp.md): on-demand-paging MRs on DEV under
# invalidation. Two RC QPs of DEV connected to each other; both buffers are anonymous mappings
# of our own registered with IBV_ACCESS_ON_DEMAND (nothing pinned). Each step moves data with
# RDMA WRITE, RDMA READ or SEND and checks every byte where it landed:
#   1. WRITE into pages never touched (responder faults), READ back (completer faults);
#   2. madvise(MADV_DONTNEED) of two target pages: they read back as zeros by RDMA READ (rrxe
#      must not use the pages it had), then a WRITE lands in the new pages;
#   3. munmap + mmap at the same address (MAP_FIXED) of a target page and of a source page:
#      a WRITE from the new source page lands in the new target page;
#   4. a SEND into a receive buffer whose pages were just dropped;
#   5. ibv_advise_mr prefetch of the target, then a WRITE;
#   6. a WRITE into a target page the process unmapped: a remote access error, no hang.
# Prints one line per step and "odp-invalidate: ok" when every byte matched; exits 1 otherwise.
import argparse
import ctypes
import ctypes.util
import mmap
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

PAGE = mmap.PAGESIZE
NPAGES = 8
LEN = NPAGES * PAGE
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
MAP_FIXED = 0x10
MADV_DONTNEED = 4
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_ON_DEMAND)
failures = []


def anon(addr=None, length=LEN):
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (MAP_FIXED if addr else 0)
    p = libc.mmap(addr, length, PROT_RW, flags, -1, 0)
    if p in (None, ctypes.c_void_p(-1).value) or (addr and p != addr):
        sys.exit(f"mmap failed: errno {ctypes.get_errno()}")
    return p


def fill(addr, off, data):
    ctypes.memmove(addr + off, data, len(data))


def peek(addr, off, n):
    return ctypes.string_at(addr + off, n)


def pattern(seed, n):
    return bytes((i * 7 + seed) & 0xff for i in range(n))


def expect(step, got, want):
    ok = got == want
    if not ok:
        bad = next(i for i in range(min(len(got), len(want))) if got[i] != want[i])
        failures.append(step)
        print(f"odp-invalidate: {step}: MISMATCH at byte {bad} (page {bad // PAGE}): "
              f"got {got[bad]:#x} want {want[bad]:#x}", flush=True)
    else:
        print(f"odp-invalidate: {step}: {len(want)} bytes ok", flush=True)


def poll(cq, n=1, timeout=30.0):
    return vmverbs.poll(cq, n, "odp-invalidate", timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    a = ap.parse_args()
    ctx = Context(name=a.dev)
    pd = PD(ctx)
    cq = CQ(ctx, 64)
    gi = vmverbs.gid_index(ctx)

    def mkqp():
        qa = QPAttr(port_num=1)
        qa.qp_access_flags = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
                              e.IBV_ACCESS_REMOTE_READ)
        init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                          cap=QPCap(max_send_wr=16, max_recv_wr=16))
        return QP(pd, init, qa)

    cli, srv = mkqp(), mkqp()
    for q, peer in ((cli, srv), (srv, cli)):
        q.to_rts(vmverbs.rc_attr(ctx, gi, peer))

    src = anon()
    dst = anon()
    smr = MR(pd, LEN, ACCESS, address=src)
    dmr = MR(pd, LEN, ACCESS, address=dst)

    def write(off, n, doff=None):
        doff = off if doff is None else doff
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src + off, n, smr.lkey)])
        wr.set_wr_rdma(dmr.rkey, dst + doff)
        cli.post_send(wr)
        poll(cq)

    def read(off, n):
        # The target's bytes back into the source buffer, at the same offset.
        wr = SendWR(opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(src + off, n, smr.lkey)])
        wr.set_wr_rdma(dmr.rkey, dst + off)
        cli.post_send(wr)
        poll(cq)

    # 1. Never-touched target pages; the source was written by the CPU only.
    a_ = pattern(1, LEN)
    fill(src, 0, a_)
    write(0, LEN)
    expect("write into untouched pages", peek(dst, 0, LEN), a_)
    fill(src, 0, bytes(LEN))
    read(0, LEN)
    expect("read back into the source", peek(src, 0, LEN), a_)

    # 2. MADV_DONTNEED of target pages 2..3: zeros, by CPU and by RDMA READ.
    if libc.madvise(dst + 2 * PAGE, 2 * PAGE, MADV_DONTNEED) != 0:
        sys.exit(f"madvise failed: errno {ctypes.get_errno()}")
    want = a_[:2 * PAGE] + bytes(2 * PAGE) + a_[4 * PAGE:]
    expect("cpu view after MADV_DONTNEED", peek(dst, 0, LEN), want)
    fill(src, 0, bytes(LEN))
    read(0, LEN)
    expect("rdma read after MADV_DONTNEED", peek(src, 0, LEN), want)
    b_ = pattern(2, LEN)
    fill(src, 0, b_)
    write(0, LEN)
    expect("write after MADV_DONTNEED", peek(dst, 0, LEN), b_)

    # 3. munmap + mmap (MAP_FIXED) of target page 5 and source page 6.
    libc.munmap(dst + 5 * PAGE, PAGE)
    anon(dst + 5 * PAGE, PAGE)
    libc.munmap(src + 6 * PAGE, PAGE)
    anon(src + 6 * PAGE, PAGE)
    c_ = pattern(3, LEN)
    fill(src, 0, c_)
    write(0, LEN)
    expect("write after munmap+mmap", peek(dst, 0, LEN), c_)
    fill(src, 0, bytes(LEN))
    read(0, LEN)
    expect("read after munmap+mmap", peek(src, 0, LEN), c_)

    # 4. SEND into a receive buffer whose pages were just dropped.
    libc.madvise(dst, LEN, MADV_DONTNEED)
    srv.post_recv(RecvWR(wr_id=7, num_sge=1, sg=[SGE(dst + PAGE, 3 * PAGE, dmr.lkey)]))
    d_ = pattern(4, 3 * PAGE)
    fill(src, 0, d_)
    cli.post_send(SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src, 3 * PAGE, smr.lkey)]))
    wcs = poll(cq, 2)
    expect("send into dropped pages", peek(dst, PAGE, 3 * PAGE), d_)
    if not any(w.wr_id == 7 and w.byte_len == 3 * PAGE for w in wcs):
        failures.append("send completion")
        print("odp-invalidate: send: no receive completion of the full length", flush=True)

    # 5. Prefetch (ibv_advise_mr), then a WRITE.
    libc.madvise(dst, LEN, MADV_DONTNEED)
    pf = "skipped (no advise_mr in this pyverbs)"
    if hasattr(pd, "advise_mr"):
        pd.advise_mr(e._IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, e._IBV_ADVISE_MR_FLAG_FLUSH,
                     [SGE(dst, LEN, dmr.lkey)])
        pf = "done"
    print(f"odp-invalidate: prefetch {pf}", flush=True)
    f_ = pattern(5, LEN)
    fill(src, 0, f_)
    write(0, LEN)
    expect("write after prefetch", peek(dst, 0, LEN), f_)

    # 6. A WRITE into a target page the process unmapped (no mapping left to fault in): the
    #    fault fails, the responder answers a remote access error, nothing hangs (last: the
    #    QPs go to ERR).
    libc.munmap(dst + 7 * PAGE, PAGE)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src, PAGE, smr.lkey)])
    wr.set_wr_rdma(dmr.rkey, dst + 7 * PAGE)
    cli.post_send(wr)
    end = time.time() + 30
    st = None
    while st is None and time.time() < end:
        nc, wcs = cq.poll(1)
        if nc:
            st = wcs[0].status
    if st == e.IBV_WC_REM_ACCESS_ERR:
        print("odp-invalidate: write into an unmapped page: remote access error", flush=True)
    else:
        failures.append("unmapped page")
        print(f"odp-invalidate: write into an unmapped page: status {st}, want "
              f"{e.IBV_WC_REM_ACCESS_ERR}", flush=True)

    for o in (smr, dmr, cli, srv, cq, pd, ctx):
        o.close()
    if failures:
        print(f"odp-invalidate: {len(failures)} steps failed: {', '.join(failures)}")
        sys.exit(1)
    print("odp-invalidate: ok")


main()
