//! rrxe-memcpy: single-core memcpy bandwidth in the guest, the yardstick `make bench` puts
//! beside `ib_write_bw` at 64 KiB (whose loopback data path copies each payload byte twice:
//! the sender's buffer into a packet, the packet into the receiver's buffer).
//!
//!   rrxe-memcpy [--size 65536] [--total-mib 1024]
//!
//! Copies a `size`-byte buffer into another one of the same size (both stay in the cache, as
//! perftest's buffers and the driver's packet buffers do) until `total-mib` MiB have been
//! copied, and prints one line: `MEMCPY <size> <MB/s>` (10^6 bytes per second of wall clock).

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

fn arg(args: &[String], name: &str, default: usize) -> Option<usize> {
    match args.iter().position(|a| a == name) {
        None => Some(default),
        Some(i) => args.get(i + 1)?.parse().ok(),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(size), Some(total_mib)) =
        (arg(&args, "--size", 65536), arg(&args, "--total-mib", 1024))
    else {
        eprintln!("usage: rrxe-memcpy [--size BYTES] [--total-mib MIB]");
        return ExitCode::from(2);
    };
    if size == 0 || total_mib == 0 {
        eprintln!("rrxe-memcpy: size and total must be positive");
        return ExitCode::from(2);
    }
    let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut dst = vec![0u8; size];
    let rounds = (total_mib << 20).div_ceil(size);
    // One round first: page faults and the first touch of the cache are not memcpy.
    dst.copy_from_slice(&src);
    let t = Instant::now();
    for _ in 0..rounds {
        black_box(&mut dst).copy_from_slice(black_box(&src));
    }
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(dst, src);
    println!("MEMCPY {size} {:.0}", (rounds * size) as f64 / secs / 1e6);
    ExitCode::SUCCESS
}
