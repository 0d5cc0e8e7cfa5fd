//! rrxe-verbs-test: the control-path verbs test (PD/CQ/QP/MR/AH, the QP state machine and
//! attribute rules) of rrxe, runnable against any RoCE device (`--dev rxe0` for the
//! reference). Prints `PASS name` / `FAIL name: reason` (plus `SKIP`/`INFO` lines) and a
//! closing `N passed, N failed`; exits non-zero when a check failed.
//!
//! The expected accept/reject of every modify comes from kmod/logic (the QP state table of
//! Linux 6.12 verbs.c), i.e. from the InfiniBand rules, not from what rxe happens to do.

mod checks;
mod env;

use std::net::Ipv4Addr;
use std::process::ExitCode;

use env::{gid_str, Env};
use rrxe_verbs_test::util::Report;

const USAGE: &str = "usage: rrxe-verbs-test [--dev NAME] [--port N] [--gid-index N] [--peer IPV4]
                      [--only CHECK[,CHECK]]... [--skip CHECK[,CHECK]]... [--cycles N] [--hold]

  --dev NAME       RDMA device (default rrxe0)
  --port N         port (default 1)
  --gid-index N    source GID index (default: the RoCE v2 GID of an IPv4 address)
  --peer IPV4      the other address of the link, for addr.*.neighbour_gid
                   (default: 10.99.0.2 <-> 10.99.0.1)
  --only CHECK     run only checks named CHECK or below it (e.g. mask, mask.rc,
                   values.rc.timeout_32); groups: walk query mask invalid_transition values
                   addr mcast limits create cycles
  --skip CHECK     do not run these
  --cycles N       create/destroy cycles per object (default 1000)
  --hold           create one of each object, print HOLDING, sleep until killed";

struct Opts {
    dev: String,
    port: u8,
    gid_index: Option<u32>,
    peer: Option<Ipv4Addr>,
    only: Vec<String>,
    skip: Vec<String>,
    cycles: u32,
    hold: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dev: "rrxe0".to_owned(),
        port: 1,
        gid_index: None,
        peer: None,
        only: Vec::new(),
        skip: Vec::new(),
        cycles: 1000,
        hold: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |what: &str| args.next().ok_or_else(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--dev" => o.dev = val("a device name")?,
            "--port" => {
                o.port = val("a number")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--gid-index" => {
                o.gid_index = Some(
                    val("a number")?
                        .parse()
                        .map_err(|e| format!("--gid-index: {e}"))?,
                )
            }
            "--peer" => {
                o.peer = Some(
                    val("an IPv4 address")?
                        .parse()
                        .map_err(|e| format!("--peer: {e}"))?,
                )
            }
            "--only" => o
                .only
                .extend(val("a check name")?.split(',').map(str::to_owned)),
            "--skip" => o
                .skip
                .extend(val("a check name")?.split(',').map(str::to_owned)),
            "--cycles" => {
                o.cycles = val("a number")?
                    .parse()
                    .map_err(|e| format!("--cycles: {e}"))?
            }
            "--hold" => o.hold = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rrxe-verbs-test: {e}");
            return ExitCode::from(2);
        }
    };
    let mut r = Report::new(o.only.clone(), o.skip.clone());
    let env = match Env::open(&o.dev, o.port, o.gid_index, o.peer) {
        Ok(e) => e,
        Err(e) => {
            r.fail("setup", e);
            r.summary();
            return ExitCode::FAILURE;
        }
    };
    if o.hold {
        if let Err(e) = checks::hold::run(&env) {
            eprintln!("rrxe-verbs-test --hold: {e}");
        }
        return ExitCode::FAILURE;
    }
    r.info(
        "setup",
        format!(
            "device {} port {} active_mtu {} pkey_tbl_len {} gid_tbl_len {} sgid[{}] {} peer {}",
            env.name,
            env.port,
            env.port_attr.active_mtu,
            env.port_attr.pkey_tbl_len,
            env.port_attr.gid_tbl_len,
            env.gid_index,
            gid_str(&env.gid),
            env.peer_ip.map_or("none".to_owned(), |p| p.to_string()),
        ),
    );
    checks::walk::run(&env, &mut r);
    checks::query::run(&env, &mut r);
    checks::masks::run(&env, &mut r);
    checks::invalid::run(&env, &mut r);
    checks::values::run(&env, &mut r);
    checks::addr::run(&env, &mut r);
    checks::mcast::run(&env, &mut r);
    checks::limits::run(&env, &mut r);
    checks::create::run(&env, &mut r);
    checks::cycles::run(&env, &mut r, o.cycles);
    drop(env);
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
