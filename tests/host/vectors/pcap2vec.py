#!/usr/bin/env python3
"""Distils rdma_rxe captures (tests/vm/capture-rxe.sh) into tests/host/vectors/rxe-roce.txt.

    tests/host/vectors/pcap2vec.py build/vm-logs/<run>/rxe.pcap [more.pcap...] > rxe-roce.txt

Keeps, in capture order, the first packet of each kind: (IP version, opcode, pad count, AETH
syndrome, non-zero TOS/traffic class, PSN at the wrap) -- every opcode rxe sent, every pad
count it sent with that opcode, every ACK/NAK syndrome. Each kept packet is written as one
hex line: the IP packet from its header through the ICRC (Ethernet header and any trailing
Ethernet padding removed), preceded by a comment line describing it. Pure standard library.
"""
import struct
import sys

NAMES = {
    0x00: "RC_SEND_FIRST", 0x01: "RC_SEND_MIDDLE", 0x02: "RC_SEND_LAST",
    0x03: "RC_SEND_LAST_WITH_IMMEDIATE", 0x04: "RC_SEND_ONLY",
    0x05: "RC_SEND_ONLY_WITH_IMMEDIATE", 0x06: "RC_RDMA_WRITE_FIRST",
    0x07: "RC_RDMA_WRITE_MIDDLE", 0x08: "RC_RDMA_WRITE_LAST",
    0x09: "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 0x0a: "RC_RDMA_WRITE_ONLY",
    0x0b: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 0x0c: "RC_RDMA_READ_REQUEST",
    0x0d: "RC_RDMA_READ_RESPONSE_FIRST", 0x0e: "RC_RDMA_READ_RESPONSE_MIDDLE",
    0x0f: "RC_RDMA_READ_RESPONSE_LAST", 0x10: "RC_RDMA_READ_RESPONSE_ONLY",
    0x11: "RC_ACKNOWLEDGE", 0x12: "RC_ATOMIC_ACKNOWLEDGE", 0x13: "RC_COMPARE_SWAP",
    0x14: "RC_FETCH_ADD", 0x16: "RC_SEND_LAST_WITH_INVALIDATE",
    0x17: "RC_SEND_ONLY_WITH_INVALIDATE", 0x1c: "RC_FLUSH", 0x1d: "RC_ATOMIC_WRITE",
    0x60 | 0x04: "UD_SEND_ONLY", 0x60 | 0x05: "UD_SEND_ONLY_WITH_IMMEDIATE",
}
for low in range(0x0c):
    NAMES[0x20 | low] = "UC" + NAMES[low][2:]
HDR = {0x03: 4, 0x05: 4, 0x06: 16, 0x09: 4, 0x0a: 16, 0x0b: 20, 0x0c: 16, 0x0d: 4, 0x0f: 4,
       0x10: 4, 0x11: 4, 0x12: 12, 0x13: 28, 0x14: 28, 0x16: 4, 0x17: 4, 0x64: 8, 0x65: 12}


def frames(path):
    d = open(path, "rb").read()
    magic, = struct.unpack("<I", d[:4])
    if magic != 0xA1B2C3D4:
        sys.exit(f"{path}: not a little-endian microsecond pcap")
    if struct.unpack("<I", d[20:24])[0] != 1:
        sys.exit(f"{path}: not Ethernet")
    off = 24
    while off + 16 <= len(d):
        _, _, incl, orig = struct.unpack("<IIII", d[off:off + 16])
        off += 16
        if incl == orig:
            yield d[off:off + incl]
        off += incl


def main():
    seen = set()
    out = ["# RoCEv2 packets sent by Linux 6.12 rdma_rxe (rxe0 on veth0 <-> rxe1 on veth1),",
           "# captured on veth0 by tests/vm/capture-rxe.sh and distilled by pcap2vec.py.",
           "# One packet per hex line: IP header through ICRC. The comment line before it says",
           "# what it is (capture index, IP version, opcode, QPN, PSN, pad, payload length)."]
    n = kept = 0
    for path in sys.argv[1:]:
        for f in frames(path):
            n += 1
            etype, = struct.unpack(">H", f[12:14])
            ip = f[14:]
            if etype == 0x0800 and ip[0] == 0x45 and ip[9] == 17:
                v, iplen, tos = 4, 20, ip[1]
            elif etype == 0x86DD and ip[6] == 17:
                v, iplen, tos = 6, 40, ((ip[0] & 0x0F) << 4) | (ip[1] >> 4)
            else:
                continue
            udp = ip[iplen:]
            if struct.unpack(">H", udp[2:4])[0] != 4791:
                continue
            ulen, = struct.unpack(">H", udp[4:6])
            pkt = ip[:iplen + ulen]
            bth = udp[8:20]
            op, pad = bth[0], (bth[1] >> 4) & 3
            qpn = int.from_bytes(bth[5:8], "big")
            psn = int.from_bytes(bth[9:12], "big")
            syn = udp[20] if op in (0x11, 0x12) else None
            # A non-zero TOS only makes a new kind on small packets (keeps full-MTU ones rare).
            key = (v, op, pad, syn, tos != 0 and ulen < 200, psn in (0, 0xFFFFFF))
            if key in seen:
                continue
            seen.add(key)
            kept += 1
            paylen = ulen - 8 - 12 - HDR.get(op & 0x1F if op < 0x40 else op, 0) - pad - 4
            name = NAMES.get(op, f"opcode {op:#04x}")
            extra = f" syndrome={syn:#04x}" if syn is not None else ""
            out.append(f"# {n - 1} ipv{v} {name} qpn={qpn} psn={psn:#08x} pad={pad} "
                       f"payload={paylen} tos={tos:#04x}{extra}")
            out.append(pkt.hex())
    print("\n".join(out))
    print(f"pcap2vec: kept {kept} of {n} packets", file=sys.stderr)


if __name__ == "__main__":
    main()
