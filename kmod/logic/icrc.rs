// SPDX-License-Identifier: GPL-2.0-only
//! The RoCEv2 invariant CRC (ICRC), computed exactly as rdma_rxe computes it (`rxe_icrc.c`).
//!
//! The ICRC is the standard reflected CRC-32 (polynomial `0xEDB88320`, the Ethernet/zlib CRC)
//! over:
//!
//! 1. 8 bytes of `0xff`, standing in for the (absent) masked LRH. rxe folds them into its seed
//!    [`ICRC_SEED`] (`0xdebb20e3` = the CRC state after `0xff` × 8 from `0xffffffff`);
//! 2. the IP header (IPv4: 20 bytes, no options; IPv6: 40 bytes), the UDP header and the BTH,
//!    with the *variant* fields set to all ones ([`IPV4_MASK`], [`IPV6_MASK`], [`UDP_MASK`],
//!    [`BTH_MASK`]): IPv4 TOS (DSCP+ECN), TTL and header checksum; IPv6 traffic class, flow
//!    label and hop limit; the UDP checksum; BTH byte 4 (`resv8a`, which on RoCEv2 holds the
//!    FECN/BECN bits, so ECN marking never breaks the ICRC);
//! 3. the remaining extension headers, the payload and the pad bytes, unmasked, up to the ICRC.
//!
//! The final CRC is inverted (`~crc`) and stored in the last four bytes of the UDP datagram.
//! rxe stores it with `*(__be32 *)icrcp = ~crc` where `crc` is a CPU-order `crc32_le()`
//! result, so on the (little-endian) hosts rxe runs on the wire carries the value
//! **little-endian** — the same byte order as the Ethernet FCS, and what RoCE NICs expect.
//! Functions here return the ICRC as a `u32` whose wire bytes are `icrc.to_le_bytes()`
//! ([`icrc_to_wire`], [`stored_icrc`]).

/// The reflected CRC-32 polynomial (IEEE 802.3).
pub const CRC32_POLY: u32 = 0xedb8_8320;

/// The CRC state after feeding the masked LRH (8 bytes of `0xff`) into a CRC started at
/// `0xffffffff`: rxe's seed for every ICRC.
pub const ICRC_SEED: u32 = 0xdebb_20e3;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;
/// Length of an IPv4 header without options (the only kind RoCEv2 uses).
pub const IPV4_HDR_LEN: usize = 20;
/// Length of the IPv6 header.
pub const IPV6_HDR_LEN: usize = 40;
/// Length of the UDP header.
pub const UDP_HDR_LEN: usize = 8;
/// Length of the BTH.
pub const BTH_LEN: usize = 12;

/// Bits of the IPv4 header forced to 1 for the ICRC: TOS (byte 1), TTL (byte 8), header
/// checksum (bytes 10–11).
pub const IPV4_MASK: [u8; IPV4_HDR_LEN] = [
    0, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// Bits of the IPv6 header forced to 1 for the ICRC: traffic class (low nibble of byte 0 and
/// high nibble of byte 1), flow label (rest of bytes 1–3) and hop limit (byte 7).
pub const IPV6_MASK: [u8; IPV6_HDR_LEN] = {
    let mut m = [0u8; IPV6_HDR_LEN];
    m[0] = 0x0f;
    m[1] = 0xff;
    m[2] = 0xff;
    m[3] = 0xff;
    m[7] = 0xff;
    m
};

/// Bits of the UDP header forced to 1 for the ICRC: the checksum (bytes 6–7).
pub const UDP_MASK: [u8; UDP_HDR_LEN] = [0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// Bits of the BTH forced to 1 for the ICRC: byte 4 (`resv8a`: FECN, BECN, 6 reserved bits).
pub const BTH_MASK: [u8; BTH_LEN] = [0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0];

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ CRC32_POLY
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

/// Slice-by-8 tables of the reflected CRC-32: `CRC32_TABLES[0]` is the classic byte table,
/// `CRC32_TABLES[k][b]` the CRC of byte `b` followed by `k` zero bytes.
pub static CRC32_TABLES: [[u32; 256]; 8] = make_tables();

#[inline(always)]
fn t(k: usize, b: u32) -> u32 {
    // `b as u8` is < 256 and `k` < 8 at every call site: the lookups cannot miss.
    match CRC32_TABLES.get(k) {
        Some(row) => match row.get((b as u8) as usize) {
            Some(v) => *v,
            None => 0,
        },
        None => 0,
    }
}

/// Continues a reflected CRC-32 over `data` from state `crc`, without any pre- or
/// post-inversion: the kernel's `crc32_le(crc, data, len)`. The standard CRC-32 of `data` is
/// `!crc32_le(!0, data)`.
pub fn crc32_le(mut crc: u32, data: &[u8]) -> u32 {
    // `chunks_exact`, not `as_chunks` (Rust 1.88; the kernel's minimum is 1.78).
    let blocks = data.chunks_exact(8);
    let tail = blocks.remainder();
    for b in blocks {
        let lo = crc ^ u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        crc = t(7, lo)
            ^ t(6, lo >> 8)
            ^ t(5, lo >> 16)
            ^ t(4, lo >> 24)
            ^ t(3, b[4] as u32)
            ^ t(2, b[5] as u32)
            ^ t(1, b[6] as u32)
            ^ t(0, b[7] as u32);
    }
    for &b in tail {
        crc = (crc >> 8) ^ t(0, crc ^ b as u32);
    }
    crc
}

/// Why an ICRC could not be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrcError {
    /// The bytes end before the headers (or the datagram the UDP length announces) do.
    Truncated,
    /// The IP version nibble is neither 4 nor 6.
    NotIp,
    /// An IPv4 header with options (IHL other than 5): RoCEv2 never sends them, and rxe's
    /// pseudo-header would be wrong for them.
    Ipv4Options,
    /// The IP payload is not UDP.
    NotUdp,
    /// The UDP length is shorter than UDP header + BTH + ICRC.
    BadUdpLength,
}

/// An ICRC computation in progress, for packets whose bytes are not contiguous (headers in
/// one buffer, payload in pages): start it with the IP, UDP and BTH headers, feed the rest of
/// the extension headers, the payload and the pad with [`Icrc::update`], then [`Icrc::finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icrc {
    crc: u32,
}

fn masked<const N: usize>(crc: u32, bytes: &[u8; N], mask: &[u8; N]) -> u32 {
    let mut buf = [0u8; N];
    for ((o, b), m) in buf.iter_mut().zip(bytes).zip(mask) {
        *o = b | m;
    }
    crc32_le(crc, &buf)
}

impl Icrc {
    /// Starts the ICRC of an IPv4 RoCEv2 packet from its IPv4 header (no options), UDP
    /// header and BTH. The masked fields may hold anything.
    pub fn new_v4(ip: &[u8; IPV4_HDR_LEN], udp: &[u8; UDP_HDR_LEN], bth: &[u8; BTH_LEN]) -> Icrc {
        let crc = masked(ICRC_SEED, ip, &IPV4_MASK);
        Icrc::udp_bth(crc, udp, bth)
    }

    /// Starts the ICRC of an IPv6 RoCEv2 packet from its IPv6 header, UDP header and BTH.
    pub fn new_v6(ip: &[u8; IPV6_HDR_LEN], udp: &[u8; UDP_HDR_LEN], bth: &[u8; BTH_LEN]) -> Icrc {
        let crc = masked(ICRC_SEED, ip, &IPV6_MASK);
        Icrc::udp_bth(crc, udp, bth)
    }

    fn udp_bth(crc: u32, udp: &[u8; UDP_HDR_LEN], bth: &[u8; BTH_LEN]) -> Icrc {
        let crc = masked(crc, udp, &UDP_MASK);
        Icrc {
            crc: masked(crc, bth, &BTH_MASK),
        }
    }

    /// Feeds the next bytes after the BTH: extension headers, payload, pad (never the ICRC).
    pub fn update(&mut self, data: &[u8]) {
        self.crc = crc32_le(self.crc, data);
    }

    /// The ICRC: its wire bytes are `finish().to_le_bytes()`.
    pub fn finish(self) -> u32 {
        !self.crc
    }
}

/// A UDP datagram's header, BTH, and the bytes the ICRC covers after the BTH.
type UdpParts<'a> = (&'a [u8; UDP_HDR_LEN], &'a [u8; BTH_LEN], &'a [u8]);

/// Splits a UDP datagram (header through ICRC) into its [`UdpParts`].
fn split_udp(udp: &[u8]) -> Result<UdpParts<'_>, IcrcError> {
    let covered = match udp.len().checked_sub(ICRC_LEN) {
        Some(n) if n >= UDP_HDR_LEN + BTH_LEN => n,
        _ => return Err(IcrcError::Truncated),
    };
    let (hdr, rest) = udp
        .split_first_chunk::<UDP_HDR_LEN>()
        .ok_or(IcrcError::Truncated)?;
    let (bth, rest) = rest
        .split_first_chunk::<BTH_LEN>()
        .ok_or(IcrcError::Truncated)?;
    let tail = rest
        .get(..covered - UDP_HDR_LEN - BTH_LEN)
        .ok_or(IcrcError::Truncated)?;
    Ok((hdr, bth, tail))
}

/// The ICRC of an IPv4 RoCEv2 packet: `ip` is its IPv4 header (no options), `udp` the whole
/// UDP datagram, header through ICRC (the ICRC's own four bytes are not read, so this both
/// generates and checks).
pub fn icrc_v4(ip: &[u8; IPV4_HDR_LEN], udp: &[u8]) -> Result<u32, IcrcError> {
    let (hdr, bth, rest) = split_udp(udp)?;
    let mut c = Icrc::new_v4(ip, hdr, bth);
    c.update(rest);
    Ok(c.finish())
}

/// The ICRC of an IPv6 RoCEv2 packet: `ip` is its IPv6 header, `udp` the whole UDP datagram,
/// header through ICRC.
pub fn icrc_v6(ip: &[u8; IPV6_HDR_LEN], udp: &[u8]) -> Result<u32, IcrcError> {
    let (hdr, bth, rest) = split_udp(udp)?;
    let mut c = Icrc::new_v6(ip, hdr, bth);
    c.update(rest);
    Ok(c.finish())
}

/// `IB_OPCODE_RC_FLUSH`.
const RC_FLUSH: u8 = 0x1c;

/// What rdma_rxe (Linux 6.12) adds to the ICRC of an RC FLUSH: its opcode table gives FLUSH no
/// payload offset, so `payload_addr()` is the BTH and `payload_size()` the whole packet but the
/// ICRC, and its ICRC covers the headers a second time, raw (BTH unmasked), after the usual
/// coverage. `roce` is the packet, BTH through ICRC; `None` for any other opcode (and for a
/// packet too short to hold an ICRC).
pub fn rxe_flush_tail(roce: &[u8]) -> Option<&[u8]> {
    if roce.first() != Some(&RC_FLUSH) {
        return None;
    }
    roce.get(..roce.len().checked_sub(ICRC_LEN)?)
}

/// [`icrc_v4`] as rdma_rxe computes it: the same for every opcode but RC FLUSH, whose headers
/// it covers twice ([`rxe_flush_tail`]). rrxe sends FLUSH with this ICRC (rdma_rxe drops a
/// FLUSH with the IBTA's) and accepts either.
pub fn icrc_v4_rxe(ip: &[u8; IPV4_HDR_LEN], udp: &[u8]) -> Result<u32, IcrcError> {
    let (hdr, bth, rest) = split_udp(udp)?;
    let mut c = Icrc::new_v4(ip, hdr, bth);
    c.update(rest);
    if let Some(t) = rxe_flush_tail(udp.get(UDP_HDR_LEN..).unwrap_or(&[])) {
        c.update(t);
    }
    Ok(c.finish())
}

/// [`icrc_v6`] as rdma_rxe computes it (see [`icrc_v4_rxe`]).
pub fn icrc_v6_rxe(ip: &[u8; IPV6_HDR_LEN], udp: &[u8]) -> Result<u32, IcrcError> {
    let (hdr, bth, rest) = split_udp(udp)?;
    let mut c = Icrc::new_v6(ip, hdr, bth);
    c.update(rest);
    if let Some(t) = rxe_flush_tail(udp.get(UDP_HDR_LEN..).unwrap_or(&[])) {
        c.update(t);
    }
    Ok(c.finish())
}

/// A RoCEv2 packet seen from its IP header: the IP header and the UDP datagram (header
/// through ICRC), bounded by the UDP length field (bytes after it, such as Ethernet padding,
/// are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpUdp<'a> {
    /// IPv4.
    V4(&'a [u8; IPV4_HDR_LEN], &'a [u8]),
    /// IPv6.
    V6(&'a [u8; IPV6_HDR_LEN], &'a [u8]),
}

impl<'a> IpUdp<'a> {
    /// Splits `packet`, which starts at the IP header. Checks the IP version, the absence of
    /// IPv4 options, that the next header is UDP (no IPv6 extension headers), and that the UDP
    /// length covers at least UDP header + BTH + ICRC and fits in `packet`.
    pub fn split(packet: &'a [u8]) -> Result<IpUdp<'a>, IcrcError> {
        let first = *packet.first().ok_or(IcrcError::Truncated)?;
        match first >> 4 {
            4 => {
                let (ip, rest) = packet
                    .split_first_chunk::<IPV4_HDR_LEN>()
                    .ok_or(IcrcError::Truncated)?;
                if first & 0x0f != 5 {
                    return Err(IcrcError::Ipv4Options);
                }
                if ip[9] != 17 {
                    return Err(IcrcError::NotUdp);
                }
                Ok(IpUdp::V4(ip, udp_datagram(rest)?))
            }
            6 => {
                let (ip, rest) = packet
                    .split_first_chunk::<IPV6_HDR_LEN>()
                    .ok_or(IcrcError::Truncated)?;
                if ip[6] != 17 {
                    return Err(IcrcError::NotUdp);
                }
                Ok(IpUdp::V6(ip, udp_datagram(rest)?))
            }
            _ => Err(IcrcError::NotIp),
        }
    }

    /// The UDP datagram, header through ICRC.
    pub fn udp(&self) -> &'a [u8] {
        match self {
            IpUdp::V4(_, u) | IpUdp::V6(_, u) => u,
        }
    }

    /// The UDP payload: BTH through ICRC (what rxe's `pkt->hdr` and `paylen` describe, and
    /// what `wire::Packet::parse` takes).
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn roce(&self) -> &'a [u8] {
        self.udp().get(UDP_HDR_LEN..).unwrap_or(&[])
    }

    /// The ICRC this packet should carry.
    pub fn icrc(&self) -> Result<u32, IcrcError> {
        match *self {
            IpUdp::V4(ip, udp) => icrc_v4(ip, udp),
            IpUdp::V6(ip, udp) => icrc_v6(ip, udp),
        }
    }

    /// The ICRC the packet carries (its last four bytes, little-endian).
    pub fn stored_icrc(&self) -> Option<u32> {
        stored_icrc(self.udp())
    }
}

fn udp_datagram(after_ip: &[u8]) -> Result<&[u8], IcrcError> {
    let len = match after_ip.get(4..6) {
        Some(&[hi, lo]) => u16::from_be_bytes([hi, lo]) as usize,
        _ => return Err(IcrcError::Truncated),
    };
    if len < UDP_HDR_LEN + BTH_LEN + ICRC_LEN {
        return Err(IcrcError::BadUdpLength);
    }
    after_ip.get(..len).ok_or(IcrcError::Truncated)
}

/// The ICRC of a RoCEv2 packet given from its IP header (IPv4 or IPv6), through the ICRC.
#[cfg_attr(MODULE, expect(dead_code))]
pub fn icrc(packet: &[u8]) -> Result<u32, IcrcError> {
    IpUdp::split(packet)?.icrc()
}

/// Whether the ICRC a packet (from its IP header) carries is right.
#[cfg_attr(MODULE, expect(dead_code))]
pub fn icrc_ok(packet: &[u8]) -> Result<bool, IcrcError> {
    let p = IpUdp::split(packet)?;
    Ok(Some(p.icrc()?) == p.stored_icrc())
}

/// The ICRC stored in the last four bytes of `bytes` (a UDP datagram or its payload), read
/// little-endian as rxe writes it; `None` when `bytes` is shorter than four bytes.
pub fn stored_icrc(bytes: &[u8]) -> Option<u32> {
    bytes
        .last_chunk::<ICRC_LEN>()
        .map(|b| u32::from_le_bytes(*b))
}

/// The wire bytes of an ICRC value (little-endian).
pub const fn icrc_to_wire(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// Writes `icrc` into the last four bytes of `bytes` (a UDP datagram or its payload); `false`
/// when `bytes` is shorter than four bytes.
pub fn write_icrc(bytes: &mut [u8], icrc: u32) -> bool {
    match bytes.last_chunk_mut::<ICRC_LEN>() {
        Some(b) => {
            *b = icrc_to_wire(icrc);
            true
        }
        None => false,
    }
}
