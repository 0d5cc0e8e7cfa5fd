//! `name value` lines (`logic::kv`), the format of the `dcqcn` and `udp_counters` sysfs files.

use proptest::prelude::*;
use rrxe_host_tests::logic::kv::write_lines;

#[test]
fn lines_are_name_space_decimal_newline() {
    let mut buf = [0u8; 128];
    let n = write_lines(
        &mut buf,
        [("rx_packets", 0), ("tx_err_route", u64::MAX), ("a", 10)],
    );
    assert_eq!(
        core::str::from_utf8(&buf[..n]).unwrap(),
        "rx_packets 0\ntx_err_route 18446744073709551615\na 10\n"
    );
}

#[test]
fn a_short_buffer_is_filled_and_never_overrun() {
    let mut buf = [0u8; 5];
    assert_eq!(write_lines(&mut buf, [("rx_packets", 7)]), 5);
    assert_eq!(&buf, b"rx_pa");
    assert_eq!(write_lines(&mut [], [("x", 1)]), 0);
}

proptest! {
    #[test]
    fn output_is_the_formatted_prefix(values in proptest::collection::vec(any::<u64>(), 0..8), cap in 0usize..200) {
        let names = ["a", "bb", "ccc", "dddd", "e", "ff", "ggg", "h"];
        let lines: Vec<(&str, u64)> = names.iter().copied().zip(values.iter().copied()).collect();
        let full: String = lines.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        let mut buf = vec![0u8; cap];
        let n = write_lines(&mut buf, lines.iter().copied());
        prop_assert_eq!(n, full.len().min(cap));
        prop_assert_eq!(&buf[..n], &full.as_bytes()[..n]);
    }
}
