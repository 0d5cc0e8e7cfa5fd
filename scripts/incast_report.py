"""The table and plots of `make bench-incast` (scripts/bench-incast) from the guest's lines
(scripts/bench-incast-guest).

    python3 scripts/incast_report.py LOG BASE COMMIT DAY KERNEL > BASE.md   (plots: BASE-n<N>.png)
"""
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pngplot  # noqa: E402

LINE_MBPS = 10_000.0  # DCQCN's ceiling: an unlimited QP


def size(s):
    m = re.fullmatch(r"([0-9.]+)([KMG]?)b", s)
    if not m:
        return 0
    return int(float(m.group(1)) * {"": 1, "K": 1024, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def parse_tc(text):
    """(root backlog bytes, root dropped, red marked, red early, red pdrop) of a tc -s line."""
    parts = re.split(r"(?=qdisc )", text.strip())
    parts = [p for p in parts if p.startswith("qdisc ")]
    if not parts:
        return None
    root = parts[0]
    bl = re.search(r"backlog (\S+) ", root + " ")
    dr = re.search(r"\(dropped (\d+),", root)
    out = {"backlog": size(bl.group(1)) if bl else 0, "dropped": int(dr.group(1)) if dr else 0,
           "marked": 0, "early": 0, "pdrop": 0, "other": 0}
    for p in parts[1:]:
        if p.startswith("qdisc red"):
            for k in ("marked", "early", "pdrop", "other"):
                m = re.search(k + r" (\d+)", p)
                if m:
                    out[k] = int(m.group(1))
    return out


class Run:
    def __init__(self, mode, n):
        self.mode, self.n = mode, n
        self.qpn = {}          # sender qpn -> index
        self.start = None
        self.t = []            # (s since start, [bytes...])
        self.done = None
        self.q = []            # (s since start, tc dict)
        self.r = []            # (s since start, {index: (rate Mb/s or None, srtt ms or None)})
        self.ctr = {}
        self.fails = []
        self.passes = 0
        self._q_raw, self._r_raw = [], []


def parse(path):
    runs, order, info = {}, [], {}
    for line in open(path, errors="replace"):
        f = line.split()
        if line.startswith("bench-incast: kernel"):
            info["head"] = line.strip()[len("bench-incast: "):]
            m = re.search(r"tbf (\d+(?:\.\d+)?)mbit", line)
            info["rate"] = float(m.group(1)) if m else None
            m = re.search(r"(\d+)s per run", line)
            info["secs"] = int(m.group(1)) if m else None
        if line.startswith("bench-incast: rrxe0 dcqcn:"):
            info["dcqcn"] = line.strip()[len("bench-incast: rrxe0 dcqcn: "):]
        if len(f) < 4 or f[0] not in ("RUN", "Q", "R", "CTR"):
            continue
        key = (f[1], int(f[2]))
        if key not in runs:
            runs[key] = Run(*key)
            order.append(key)
        r = runs[key]
        if f[0] == "RUN":
            tag = f[3]
            if tag == "QP":
                r.qpn[int(f[5])] = int(f[4])
            elif tag == "START":
                r.start = float(f[4])
            elif tag in ("T", "DONE"):
                row = (int(f[4]) / 1000.0, [int(x) for x in f[5:]])
                if tag == "T":
                    r.t.append(row)
                else:
                    r.done = row
            elif tag == "FAIL":
                r.fails.append(" ".join(f[4:]))
            elif tag == "PASS":
                r.passes += 1
        elif f[0] == "Q":
            r._q_raw.append((float(f[3]), " ".join(f[4:])))
        elif f[0] == "R":
            r._r_raw.append((float(f[3]), f[4:]))
        elif f[0] == "CTR":
            for kv in f[3:]:
                k, _, v = kv.partition("=")
                r.ctr[k] = int(v)
    for r in runs.values():
        s0 = r.start if r.start is not None else 0.0
        for w, text in r._q_raw:
            d = parse_tc(text)
            if d:
                r.q.append((w - s0, d))
        for w, items in r._r_raw:
            m = {}
            if items and items[0].count(":") == 2:
                # The compact form of the first runs: qpn:rate kbit/s or -:srtt us
                items = " | ".join("lqpn {} {} drv_srtt_us {}".format(
                    q, "" if r == "-" else f"dcqcn_rate_kbps {r}", t)
                    for q, r, t in (it.split(":") for it in items if it.count(":") == 2)).split()
            for rec in " ".join(items).split(" | "):
                t = rec.split()
                kv = {t[i]: t[i + 1] for i in range(len(t) - 1)}
                q = kv.get("lqpn", "")
                if not q.isdigit() or int(q) not in r.qpn:
                    continue
                rate = int(kv["dcqcn_rate_kbps"]) / 1000.0 if "dcqcn_rate_kbps" in kv else LINE_MBPS
                srtt = int(kv["drv_srtt_us"]) / 1000.0 if kv.get("drv_srtt_us", "").isdigit() else None
                m[r.qpn[int(q)]] = (rate, srtt)
            r.r.append((w - s0, m))
    return runs, order, info


def window(r, secs):
    """The measured window: the last 2/3 of the posting time."""
    end = secs if secs else (r.t[-1][0] if r.t else 0)
    return end / 3.0, end


def goodputs(r, w0, w1):
    """Per-sender goodput (Mb/s) between the T samples closest inside [w0, w1]."""
    inside = [row for row in r.t if w0 - 1e-6 <= row[0] <= w1 + 0.3]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    dt = b[0] - a[0]
    if dt <= 0:
        return None
    return [(y - x) * 8 / dt / 1e6 for x, y in zip(a[1], b[1])], dt


def jain(xs):
    s, q = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * q) if q > 0 else 0.0


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarize(r, rate, secs):
    w0, w1 = window(r, secs if r.mode != "cap" else None)
    if r.mode == "cap" and r.t:
        w0, w1 = r.t[-1][0] / 3, r.t[-1][0]
    g = goodputs(r, w0, w1)
    s = {"mode": r.mode, "n": r.n, "fails": r.fails}
    if g:
        per, dt = g
        s.update(per=per, agg=sum(per), jain=jain(per), dt=dt)
    qs = [d for t, d in r.q if w0 <= t <= w1]
    if rate and qs:
        delays = [d["backlog"] * 8 / (rate * 1e6) * 1000 for d in qs]
        s.update(qmean=statistics.mean(delays), qp95=pct(delays, 95), qmax=max(delays),
                 backlog_mean=statistics.mean(d["backlog"] for d in qs))
    if r.q:
        last = r.q[-1][1]
        # With `ecn`, red marks an ECN-capable packet where it would drop it: rrxe's packets
        # (all ECT) are lost only to the full queue (pdrop) or "other"; "early" drops are of
        # packets that are not ECN-capable (IPv6 neighbour discovery; ARP is pinned).
        s.update(drops=last["pdrop"] + last["other"], alldrops=last["dropped"], marks=last["marked"],
                 early=last["early"], pdrop=last["pdrop"])
    srtts = [v[1] for t, m in r.r if w0 <= t <= w1 for v in m.values() if v[1] is not None]
    if srtts:
        s["srtt"] = statistics.median(srtts)
    s["ctr"] = r.ctr
    return s


def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def plot(runs, n, rate, secs, path):
    on, off = runs.get(("on", n)), runs.get(("off", n))
    if not on:
        return False
    fig = pngplot.Figure(960, 1120)
    fair = rate / n if rate else None
    top = (rate or 10) * 1.6
    xmax = float(secs or 30)
    panels = []
    ax = fig.panel(0, 0, 960, 280, title=f"N={n}, DCQCN ON: EACH SENDER'S DCQCN RATE (RDMA RES, TOP: UNLIMITED)",
                   xlabel="TIME (S)", ylabel="MB/S", xlim=(0, xmax), ylim=(0, top))
    for i in range(n):
        pts = [(t, m[i][0]) for t, m in on.r if i in m and 0 <= t <= xmax]
        if pts:
            ax.line([p[0] for p in pts], [p[1] for p in pts], pngplot.COLORS[i % 8])
    if fair:
        ax.hline(fair, label=f"FAIR SHARE {fair:g}")
    panels.append(ax)
    for k, (run, label) in enumerate(((on, "ON"), (off, "OFF"))):
        ax = fig.panel(0, 280 * (k + 1), 960, 280,
                       title=f"N={n}, DCQCN {label}: EACH SENDER'S GOODPUT (1 S WINDOW)",
                       xlabel="TIME (S)", ylabel="MB/S", xlim=(0, xmax), ylim=(0, top))
        if run:
            for i in range(n):
                xs, ys = [], []
                for j, (t, b) in enumerate(run.t):
                    back = [row for row in run.t[:j + 1] if row[0] >= t - 1.0 - 1e-6]
                    if back and t - back[0][0] > 0.5:
                        xs.append(t)
                        ys.append((b[i] - back[0][1][i]) * 8 / (t - back[0][0]) / 1e6)
                ax.line(xs, ys, pngplot.COLORS[i % 8])
        if fair:
            ax.hline(fair, label=f"FAIR SHARE {fair:g}")
        panels.append(ax)
    ax = fig.panel(0, 840, 960, 280, title=f"N={n}: QUEUEING DELAY AT THE BOTTLENECK (BACKLOG / RATE)",
                   xlabel="TIME (S)", ylabel="MS", xlim=(0, xmax))
    for run, c, label in ((off, pngplot.COLORS[3], "CC OFF"), (on, pngplot.COLORS[0], "CC ON")):
        if run and rate:
            pts = [(t, d["backlog"] * 8 / (rate * 1e6) * 1000) for t, d in run.q if 0 <= t <= xmax]
            ax.line([p[0] for p in pts], [p[1] for p in pts], c)
    ax.legend([("CC OFF", pngplot.COLORS[3]), ("CC ON", pngplot.COLORS[0])])
    panels.append(ax)
    for i, p in enumerate(panels[:3]):
        p.legend([(f"SENDER {j}", pngplot.COLORS[j % 8]) for j in range(n)])
    for p in panels:
        p.draw()
    fig.save(path)
    return True


def main():
    log, base, commit, day, kernel = sys.argv[1:6]
    runs, order, info = parse(log)
    rate, secs = info.get("rate"), info.get("secs")
    S = {k: summarize(runs[k], rate, secs) for k in order}
    ns = sorted({n for (m, n) in order if m != "cap"})
    print(f"# Incast with DCQCN ({day}, {commit}, {kernel} kernel)\n")
    print(f"`scripts/bench-incast` ({info.get('head', '?')}).\n")
    if os.environ.get("RRXE_INCAST_NOTE"):
        print(os.environ["RRXE_INCAST_NOTE"] + "\n")
    print(f"DCQCN settings of the senders' device: `{info.get('dcqcn', '?')}` (rates in Mb/s, times in µs).\n")
    caps = [S[k] for k in order if k[0] == "cap"]
    if caps:
        print("Lossless goodput without the bottleneck (the guest's own limit): " + ", ".join(
            f"N={c['n']}: {fmt(c.get('agg'))} Mb/s" for c in caps) + ".\n")
    print("Figures over the measured window (the last 2/3 of each run); drops and marks over the whole run:")
    print("RoCE drops are red's full-queue drops (with `ecn` red marks an ECN-capable packet instead of")
    print("dropping it, and rrxe's are all ECN-capable); `+ not ECT`: the packets red dropped early because")
    print("they were not ECN-capable (IPv6 neighbour discovery; not ARP: the neighbours are pinned), not rrxe's.")
    print("Queueing delay: the bottleneck's backlog samples divided by its rate; srtt: the senders' "
          "smoothed RTT (rrxe's own estimate), median of the samples.\n")
    print("| N | CC | goodput Mb/s | of bottleneck | RoCE drops (+ not ECT) | ECN marks | queue delay mean / p95 ms | srtt ms | Jain | per sender Mb/s | CNPs | rate cuts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        for m in ("off", "on"):
            s = S.get((m, n))
            if not s:
                continue
            share = f"{100 * s['agg'] / rate:.0f}%" if rate and "agg" in s else "-"
            per = " ".join(f"{x:.2f}" for x in s.get("per", []))
            c = s["ctr"]
            fail = " (FAILED: " + "; ".join(s["fails"]) + ")" if s["fails"] else ""
            print(f"| {n} | {m} | {fmt(s.get('agg'), '.2f')}{fail} | {share} | {s.get('drops', '-')} (+{s.get('early', '-')}) | "
                  f"{s.get('marks', '-')} | {fmt(s.get('qmean'))} / {fmt(s.get('qp95'))} | "
                  f"{fmt(s.get('srtt'), '.0f')} | {fmt(s.get('jain'), '.3f')} | {per} | "
                  f"{c.get('rrxe0.rx_cnps', 0)} | {c.get('rrxe0.rate_cuts', 0)} |")
    print("\n## Against issue 29's goals (DCQCN on)\n")
    print("| N | no drops | queueing delay <= 1/5 of CC off | Jain >= 0.95 | goodput >= 90% of the bottleneck |")
    print("|---|---|---|---|---|")
    for n in ns:
        on, off = S.get(("on", n)), S.get(("off", n))
        if not on:
            continue
        d = on.get("drops")
        g1 = "-" if d is None else ("met (0)" if d == 0 else f"not met: {d} drops")
        if off and on.get("qmean") is not None and off.get("qmean"):
            ratio = on["qmean"] / off["qmean"]
            g2 = (f"met: {on['qmean']:.1f} vs {off['qmean']:.1f} ms (1/{1 / ratio:.1f})" if ratio <= 0.2 and ratio > 0
                  else f"{'met' if ratio <= 0.2 else 'not met'}: {on['qmean']:.1f} vs {off['qmean']:.1f} ms"
                  + (f" (1/{1 / ratio:.1f})" if ratio > 0 else ""))
        else:
            g2 = "-"
        j = on.get("jain")
        g3 = "-" if j is None else (f"met ({j:.3f})" if j >= 0.95 else f"not met: {j:.3f}")
        if rate and "agg" in on:
            sh = on["agg"] / rate
            g4 = f"met ({100 * sh:.0f}%)" if sh >= 0.9 else f"not met: {100 * sh:.0f}%"
        else:
            g4 = "-"
        print(f"| {n} | {g1} | {g2} | {g3} | {g4} |")
    pngs = []
    for n in ns:
        path = f"{base}-n{n}.png"
        if plot(runs, n, rate, secs, path):
            pngs.append(path)
    if pngs:
        print("\nRate and goodput over time per sender, and the queueing delay: " + ", ".join(
            f"[{os.path.basename(p)}]({os.path.basename(p)})" for p in pngs) + ".")
    print("\n<details><summary>counters per run (rrxe0 sends, rrxe1 receives)</summary>\n\n```")
    for k in order:
        s = S[k]
        print(f"{k[0]} N={k[1]}: " + " ".join(f"{a}={b}" for a, b in sorted(s['ctr'].items()))
              + f" red: marked={s.get('marks', '-')} early={s.get('early', '-')} pdrop={s.get('pdrop', '-')}")
    print("```\n</details>")


if __name__ == "__main__":
    main()
