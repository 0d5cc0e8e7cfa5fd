#!/usr/bin/python3
# Used by tests/vm/cgroup.sh: opens DEV, then creates CQs (each one an HCA object that ib_core
# charges to the caller's rdma cgroup) until a create fails or MAX succeeded. Prints one line,
# "contexts N objects M errno E" (E 0: no failure), and holds everything until stdin closes when
# --hold is given, so that the caller can read rdma.current meanwhile.
import argparse
import errno
import sys

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--max", type=int, default=64)
    ap.add_argument("--contexts", type=int, default=1)
    ap.add_argument("--hold", action="store_true")
    a = ap.parse_args()
    held, ctxs, objs, err = [], 0, 0, 0
    try:
        for _ in range(a.contexts):
            held.append(Context(name=a.dev))
            ctxs += 1
        if ctxs:
            held.append(PD(held[0]))
            objs += 1
            while objs < a.max:
                held.append(CQ(held[0], 16))
                objs += 1
    except PyverbsRDMAError as e:
        err = e.error_code
    print(f"contexts {ctxs} objects {objs} errno {err} ({errno.errorcode.get(err, '-')})",
          flush=True)
    if a.hold:
        sys.stdin.read()


main()
