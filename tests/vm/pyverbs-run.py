#!/usr/bin/python3
# rdma-core's own pyverbs test suite, run against one device, one result line per test.
# Used by tests/vm/pyverbs.sh (which runs it for rxe0 and rrxe0 and compares).
#
#   pyverbs-run.py run --tests DIR --dev DEV --out FILE [--per-test S] MODULE...
#       DIR is a directory named `tests` holding rdma-core's (uncompressed) test files.
#       Writes FILE: "module<TAB>test<TAB>status<TAB>detail" per test, status one of
#       pass, fail, error, skip, timeout. A per-test watchdog (SIGALRM) turns a hang into
#       `timeout` and goes on with the next test.
#   pyverbs-run.py compare --ref NAME=FILE --dut NAME=FILE [--xfail FILE] MODULE...
#       Prints the side-by-side table, the skips the DUT has and the reference has not, and
#       one "PASS pyverbs.<module>" / "FAIL pyverbs.<module>: ..." line per module for the DUT
#       (0 failures, errors or timeouts, apart from listed XFAILs). XFAIL file lines:
#       "test-id<TAB>reason" (test-id as unittest prints it, e.g. tests.test_qp.QPTest.test_x).
import os
import signal
import sys
import time
import traceback
import unittest


def one_line(s, n=300):
    s = ' '.join(str(s).split())
    return s if len(s) <= n else s[:n - 3] + '...'


def tb_summary(err):
    """The exception line plus the innermost frame in the test files."""
    etype, value, tb = err
    frames = traceback.extract_tb(tb)
    where = ''
    for f in reversed(frames):
        if '/tests/' in f.filename:
            where = f'{os.path.basename(f.filename)}:{f.lineno} {f.name}: '
            break
    return one_line(where + ''.join(traceback.format_exception_only(etype, value)).strip())


class Watchdog(Exception):
    pass


class Result(unittest.TestResult):
    def __init__(self, module, out, per_test):
        super().__init__()
        self.module, self.out, self.per_test = module, out, per_test
        self.status = {}

    def _rec(self, test, status, detail=''):
        tid = test.id()
        # The first verdict wins (an error in tearDown after a failure keeps the failure).
        if tid in self.status:
            return
        self.status[tid] = status
        self.out.write(f'{self.module}\t{tid}\t{status}\t{one_line(detail)}\n')
        self.out.flush()
        print(f'  {status:7} {tid} {one_line(detail, 160)}', flush=True)

    def startTest(self, test):
        super().startTest(test)
        self.t0 = time.monotonic()
        signal.alarm(self.per_test)

    def stopTest(self, test):
        signal.alarm(0)
        super().stopTest(test)

    def addSuccess(self, test):
        self._rec(test, 'pass')

    def addFailure(self, test, err):
        self._rec(test, 'fail', tb_summary(err))

    def addError(self, test, err):
        if err[0] is Watchdog:
            self._rec(test, 'timeout', f'no verdict after {self.per_test} s')
        else:
            self._rec(test, 'error', tb_summary(err))

    def addSkip(self, test, reason):
        self._rec(test, 'skip', reason)

    def addExpectedFailure(self, test, err):
        self._rec(test, 'skip', 'expectedFailure: ' + tb_summary(err))

    def addUnexpectedSuccess(self, test):
        self._rec(test, 'pass')

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = 'fail' if issubclass(err[0], test.failureException) else 'error'
            self._rec(test, kind, f'{subtest._subDescription()} ' + tb_summary(err))


def netdev_shim():
    """rdma-core's RDMATestCase finds a device's IP address through the parent device,
    /sys/class/infiniband/DEV/device/net/IF, which a software device (rxe, rrxe) has not: every
    rdmacm test then skips with "doesn't have net interface". With the shim a device without that
    link falls back to the netdev of the GID (ports/P/gid_attrs/ndevs/I), the same for any
    device; devices with a parent are untouched."""
    import tests.base as base
    orig = base.RDMATestCase._get_ip_mac

    def _get_ip_mac(self, dev, port, idx):
        nd = f'/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/{idx}'
        if os.path.exists(f'/sys/class/infiniband/{dev}/device/net/') or idx is None \
                or not os.path.exists(nd):
            return orig(self, dev, port, idx)
        with open(nd) as f:
            ifname = f.read().strip()
        try:
            ip_addr, mac_addr = self.get_ip_mac_address(ifname)
        except (KeyError, IndexError):
            self.args.append([dev, port, idx, None, None])
        else:
            self.args.append([dev, port, idx, ip_addr, mac_addr])
    base.RDMATestCase._get_ip_mac = _get_ip_mac


def run(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument('--tests', required=True)
    ap.add_argument('--dev', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--per-test', type=int, default=60)
    ap.add_argument('--netdev-shim', action='store_true')
    ap.add_argument('modules', nargs='+')
    a = ap.parse_args(argv)
    tests_dir = os.path.abspath(a.tests)
    sys.path[:0] = [tests_dir, os.path.dirname(tests_dir)]
    # rdma-core's own option parser (run_tests.py --dev): every test reads its config.
    from args_parser import parser
    sys.argv = [sys.argv[0], '--dev', a.dev]
    parser.parse_args()

    if a.netdev_shim:
        netdev_shim()

    def on_alarm(sig, frame):
        raise Watchdog()
    signal.signal(signal.SIGALRM, on_alarm)

    import importlib
    loader = unittest.TestLoader()
    with open(a.out, 'w') as out:
        for mod in a.modules:
            t0 = time.monotonic()
            print(f'pyverbs: {a.dev}: {mod}', flush=True)
            try:
                m = importlib.import_module('tests.' + mod)
                suite = loader.loadTestsFromModule(m)
            except Exception as e:  # an import error is one failing pseudo-test
                out.write(f'{mod}\t{mod}.import\terror\t{one_line(repr(e))}\n')
                continue
            res = Result(mod, out, a.per_test)
            suite.run(res)
            # Class/module fixtures failing (setUpClass) show up only in res.errors.
            for t, tb in res.errors:
                if t.id() not in res.status:
                    out.write(f'{mod}\t{t.id()}\terror\t{one_line(tb.strip().splitlines()[-1])}\n')
            print(f'pyverbs: {a.dev}: {mod}: {time.monotonic() - t0:.1f} s', flush=True)


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            p = line.rstrip('\n').split('\t')
            if len(p) == 4:
                rows[p[1]] = (p[0], p[2], p[3])
    return rows


def compare(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument('--ref', required=True)
    ap.add_argument('--dut', required=True)
    ap.add_argument('--xfail')
    ap.add_argument('--gaps')
    ap.add_argument('modules', nargs='+')
    a = ap.parse_args(argv)
    rname, rpath = a.ref.split('=', 1)
    dname, dpath = a.dut.split('=', 1)
    ref = load(rpath) if os.path.exists(rpath) else {}
    dut = load(dpath) if os.path.exists(dpath) else {}
    xfail = {}
    if a.xfail and os.path.exists(a.xfail):
        with open(a.xfail) as f:
            for line in f:
                if line.strip() and not line.startswith('#'):
                    tid, _, why = line.rstrip('\n').partition('\t')
                    xfail[tid.strip()] = why.strip()
    gaps = {}
    if a.gaps and os.path.exists(a.gaps):
        with open(a.gaps) as f:
            for line in f:
                if line.strip() and not line.startswith('#'):
                    tid, _, why = line.rstrip('\n').partition('\t')
                    gaps[tid.strip()] = why.strip()
    bad = ('fail', 'error', 'timeout')

    def counts(rows, mod):
        c = {'pass': 0, 'fail': 0, 'skip': 0, 'xfail': 0}
        for tid, (m, st, _) in rows.items():
            if m != mod:
                continue
            if st in bad:
                c['xfail' if rows is dut and tid in xfail else 'fail'] += 1
            else:
                c[st] += 1
        return c

    w = max(len(m) for m in a.modules + ['test file'])
    cw = 22
    print(f'\npyverbs: {"test file":{w}}  {rname + " pass/fail/skip":>{cw}}  '
          f'{dname + " pass/fail/skip":>{cw}}')
    tot = {rname: [0, 0, 0], dname: [0, 0, 0, 0]}

    def cell(c):
        return f'{c["pass"]}/{c["fail"]}/{c["skip"]}'
    for mod in a.modules:
        r, d = counts(ref, mod), counts(dut, mod)
        xf = f' (+{d["xfail"]} xfail)' if d['xfail'] else ''
        mark = '  <-' if (r['pass'], r['fail'], r['skip']) != (d['pass'], d['fail'], d['skip']) \
            or d['xfail'] else ''
        print(f'pyverbs: {mod:{w}}  {cell(r):>{cw}}  {cell(d):>{cw}}{xf}{mark}')
        for i, k in enumerate(('pass', 'fail', 'skip')):
            tot[rname][i] += r[k]
            tot[dname][i] += d[k]
        tot[dname][3] += d['xfail']
    rt = '/'.join(map(str, tot[rname][:3]))
    dt = '/'.join(map(str, tot[dname][:3]))
    print(f'pyverbs: {"total":{w}}  {rt:>{cw}}  {dt:>{cw}}'
          + (f' (+{tot[dname][3]} xfail)' if tot[dname][3] else ''))

    print()
    for tid in sorted(dut):
        m, st, det = dut[tid]
        if st == 'skip' and ref.get(tid, ('', ''))[1] != 'skip':
            verdict = {'pass': 'passes', 'fail': 'fails', 'error': 'errors in',
                       'timeout': 'times out in'}.get(ref.get(tid, ('', ''))[1], 'did not run')
            print(f'FINDING {dname} skips what {rname} {verdict}: {tid}: {det}')
    for tid in sorted(ref):
        m, st, det = ref[tid]
        if st in bad:
            print(f'INFO {rname} {st}: {tid}: {det}')
    for tid in sorted(dut):
        m, st, det = dut[tid]
        if st in bad and tid in xfail:
            print(f'XFAIL {tid}: {xfail[tid]} ({st}: {det})')
    print()
    failed = 0
    for mod in a.modules:
        rows = [(tid, st, det) for tid, (m, st, det) in sorted(dut.items()) if m == mod]
        if not rows:
            print(f'FAIL pyverbs.{mod}: no result on {dname}')
            failed += 1
            continue
        badrows = [r for r in rows if r[1] in bad and r[0] not in xfail]
        if badrows:
            failed += 1
            print(f'FAIL pyverbs.{mod}: {len(badrows)} of {len(rows)} on {dname}')
            for tid, st, det in badrows:
                print(f'  {st}: {tid}: {det}')
        else:
            print(f'PASS pyverbs.{mod}')
    # Parity: every test the reference passes passes on the DUT too, except the gaps listed
    # (each with its reason) in --gaps; a listed gap that has closed is reported, so that the
    # list only shrinks.
    if ref:
        behind = [tid for tid in sorted(ref) if ref[tid][0] in a.modules and ref[tid][1] == 'pass'
                  and dut.get(tid, ('', 'did not run'))[1] != 'pass' and tid not in gaps]
        closed = [tid for tid in sorted(gaps) if dut.get(tid, ('', ''))[1] == 'pass']
        for tid in sorted(gaps):
            if tid not in closed:
                print(f'GAP {tid}: {gaps[tid]}')
        if behind or closed:
            failed += 1
            print(f'FAIL pyverbs.parity_with_{rname}: {len(behind)} passing on {rname} and not on '
                  f'{dname}, {len(closed)} listed gaps closed (remove them from the list)')
            for tid in behind:
                print(f'  {dut.get(tid, ("", "did not run", ""))[1]}: {tid}: '
                      f'{dut.get(tid, ("", "", ""))[2]}')
            for tid in closed:
                print(f'  closed: {tid}')
        else:
            print(f'PASS pyverbs.parity_with_{rname}')
    return 1 if failed else 0


if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] not in ('run', 'compare'):
        sys.exit(__doc__ if False else 'usage: pyverbs-run.py run|compare ...')
    sys.exit(run(sys.argv[2:]) if sys.argv[1] == 'run' else compare(sys.argv[2:]))
