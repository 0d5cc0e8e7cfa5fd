//! Run-time view of the layout checks (the same checks also run at compile time), plus
//! consistency checks between the fact-sheet text, the generated table and the ops table.

use std::collections::BTreeMap;

use super::layout_v44::LAYOUT;
use super::*;

const TXT: &str = include_str!("layout_x86_64_v44.txt");

/// (struct, field) -> (offset, size) and struct -> (size, align), parsed from the .txt the
/// same way tools/gen_layout.py does (rxe-only structures skipped).
struct Txt {
    sizes: BTreeMap<String, (usize, usize)>,
    fields: BTreeMap<(String, String), (usize, usize)>,
    ops: Vec<(String, usize)>,
}

fn skipped(name: &str) -> bool {
    name.starts_with("urxe_") || name == "mminfo" || name == "rxe_queue_buf"
}

fn parse_txt() -> Txt {
    let mut t = Txt {
        sizes: BTreeMap::new(),
        fields: BTreeMap::new(),
        ops: Vec::new(),
    };
    let mut cur: Option<String> = None;
    for line in TXT.lines() {
        if line.starts_with("== verbs_context_ops") {
            cur = Some("__ops__".into());
        } else if let Some(rest) = line.strip_prefix("sizeof(") {
            // sizeof(struct NAME) = N, align = A
            let (name, rest) = rest.split_once(") = ").expect("sizeof line");
            let name = name.trim_start_matches("struct ").to_string();
            let (size, align) = rest.split_once(", align = ").expect("align");
            t.sizes.insert(
                name.clone(),
                (size.parse().unwrap(), align.parse().unwrap()),
            );
            cur = Some(name);
        } else if let Some(c) = &cur {
            let w: Vec<&str> = line.split_whitespace().collect();
            if c == "__ops__" {
                // [ 7] async_event off 56   (the index may be split: "[", "7]")
                let w: Vec<&str> = line
                    .trim()
                    .trim_start_matches('[')
                    .split([']', ' '])
                    .filter(|s| !s.is_empty())
                    .collect();
                if w.len() == 4 && w[2] == "off" {
                    assert_eq!(w[0].parse::<usize>().unwrap(), t.ops.len());
                    t.ops.push((w[1].to_string(), w[3].parse().unwrap()));
                }
            } else if w.len() == 5 && w[1] == "off" && w[3] == "size" {
                t.fields.insert(
                    (c.clone(), w[0].to_string()),
                    (w[2].parse().unwrap(), w[4].parse().unwrap()),
                );
            }
        }
    }
    for (i, (name, off)) in t.ops.iter().enumerate() {
        assert_eq!(*off, i * 8);
        t.fields
            .insert(("verbs_context_ops".into(), name.clone()), (*off, 8));
    }
    t.sizes.retain(|k, _| !skipped(k));
    t.fields.retain(|(k, _), _| !skipped(k));
    t
}

#[test]
fn every_struct_matches_v44() {
    let mut n = 0;
    for s in LAYOUT {
        assert_eq!(s.actual_size, s.size, "sizeof({})", s.c_name);
        assert_eq!(s.actual_align, s.align, "alignof({})", s.c_name);
        for f in s.fields {
            assert_eq!(
                f.actual_offset, f.offset,
                "offsetof({}, {})",
                s.c_name, f.c_name
            );
            assert_eq!(f.actual_size, f.size, "sizeof({}.{})", s.c_name, f.c_name);
            n += 1;
        }
    }
    assert!(
        LAYOUT.len() >= 90 && n >= 380,
        "{} structs, {n} fields",
        LAYOUT.len()
    );
}

#[test]
fn txt_and_generated_table_agree() {
    let t = parse_txt();
    let mut sizes = BTreeMap::new();
    let mut fields = BTreeMap::new();
    for s in LAYOUT {
        sizes.insert(s.c_name.to_string(), (s.size, s.align));
        for f in s.fields {
            fields.insert(
                (s.c_name.to_string(), f.c_name.to_string()),
                (f.offset, f.size),
            );
        }
    }
    assert_eq!(
        sizes, t.sizes,
        "layout_v44.rs is stale: run tools/gen_layout.py"
    );
    assert_eq!(
        fields, t.fields,
        "layout_v44.rs is stale: run tools/gen_layout.py"
    );
}

#[test]
fn context_ops_are_the_76_v44_entries_in_order() {
    let t = parse_txt();
    let txt_names: Vec<&str> = t.ops.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(VERBS_CONTEXT_OPS_NAMES.len(), 76);
    assert_eq!(VERBS_CONTEXT_OPS_NAMES, txt_names.as_slice());
    // rdma-core keeps the struct sorted; a misplaced insertion would break this.
    assert!(VERBS_CONTEXT_OPS_NAMES.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(core::mem::size_of::<verbs_context_ops>(), 76 * 8);
}

/// The provider's ops table, seen as raw words: exactly the intended slots are set, each to
/// the intended trampoline.
#[test]
fn rrxe_ops_table_fills_exactly_the_intended_slots() {
    use crate::{ah, context, cq, mw, pd, qp, qp_ex, srq};
    let table = &crate::context::RRXE_CTX_OPS;
    // SAFETY: `verbs_context_ops` is 76 `Option<fn>` (each pointer-sized, None = 0), i.e. it
    // has the size and alignment of `[usize; 76]` (asserted by the layout table).
    let words: &[usize; 76] = unsafe { &*(table as *const verbs_context_ops).cast() };
    let expected: &[(&str, usize)] = &[
        ("advise_mr", pd::advise_mr as *const () as usize),
        ("alloc_mw", mw::alloc_mw as *const () as usize),
        ("alloc_pd", pd::alloc_pd as *const () as usize),
        ("attach_mcast", qp::attach_mcast as *const () as usize),
        ("bind_mw", mw::bind_mw as *const () as usize),
        ("create_ah", ah::create_ah as *const () as usize),
        ("create_cq", cq::create_cq as *const () as usize),
        ("create_cq_ex", cq::create_cq_ex as *const () as usize),
        ("create_qp", qp::create_qp as *const () as usize),
        ("create_qp_ex", qp_ex::create_qp_ex as *const () as usize),
        ("create_srq", srq::create_srq as *const () as usize),
        ("dealloc_mw", mw::dealloc_mw as *const () as usize),
        ("dealloc_pd", pd::dealloc_pd as *const () as usize),
        ("dereg_mr", pd::dereg_mr as *const () as usize),
        ("destroy_ah", ah::destroy_ah as *const () as usize),
        ("destroy_cq", cq::destroy_cq as *const () as usize),
        ("destroy_qp", qp::destroy_qp as *const () as usize),
        ("destroy_srq", srq::destroy_srq as *const () as usize),
        ("detach_mcast", qp::detach_mcast as *const () as usize),
        ("free_context", context::free_context as *const () as usize),
        ("modify_qp", qp::modify_qp as *const () as usize),
        ("modify_srq", srq::modify_srq as *const () as usize),
        ("poll_cq", cq::poll_cq as *const () as usize),
        ("post_recv", qp::post_recv as *const () as usize),
        ("post_send", qp::post_send as *const () as usize),
        ("post_srq_recv", srq::post_srq_recv as *const () as usize),
        (
            "query_device_ex",
            context::query_device_ex as *const () as usize,
        ),
        ("query_port", context::query_port as *const () as usize),
        ("query_qp", qp::query_qp as *const () as usize),
        ("query_srq", srq::query_srq as *const () as usize),
        ("reg_mr", pd::reg_mr as *const () as usize),
        ("req_notify_cq", cq::req_notify_cq as *const () as usize),
        ("resize_cq", cq::resize_cq as *const () as usize),
    ];
    let set: Vec<(&str, usize)> = words
        .iter()
        .zip(VERBS_CONTEXT_OPS_NAMES)
        .filter(|(w, _)| **w != 0)
        .map(|(w, n)| (*n, *w))
        .collect();
    assert_eq!(set, expected);
    // Never the dummy while CQs exist (it returns 95 = "95 completions").
    assert!(table.create_cq.is_some() && table.poll_cq.is_some());
    // Left to libibverbs' dummies (README.md): create_srq_ex (XRC/TM), and cq_event (a no-op
    // is what rrxe needs).
    assert!(table.create_srq_ex.is_none());
    assert!(table.cq_event.is_none());
}

#[test]
fn device_ops_registration_record() {
    use crate::provider::{RRXE_DEVICE_OPS, RRXE_MATCH_TABLE};
    let ops = &RRXE_DEVICE_OPS;
    assert_eq!(ops.match_min_abi_version, rrxe_uapi::UVERBS_ABI_VERSION);
    assert_eq!(ops.match_max_abi_version, rrxe_uapi::UVERBS_ABI_VERSION);
    // Never NULL (libibverbs 44 crashes), and only the sentinel.
    assert!(!ops.match_table.is_null());
    assert_eq!(ops.match_table, RRXE_MATCH_TABLE.as_ptr());
    assert_eq!(RRXE_MATCH_TABLE.len(), 1);
    assert_eq!(RRXE_MATCH_TABLE[0].kind, VERBS_MATCH_SENTINEL);
    assert!(ops.match_device.is_some() && ops.alloc_device.is_some());
    assert!(ops.alloc_context.is_some() && ops.uninit_device.is_some());
    assert!(ops.static_providers.is_null() && ops.import_context.is_none());
    // SAFETY: `name` points to a static C string literal.
    let name = unsafe { core::ffi::CStr::from_ptr(ops.name) };
    assert_eq!(name.to_str(), Ok("rrxe"));
}

#[test]
fn driver_command_udata_sizes() {
    use core::mem::size_of;
    // What the kernel's alloc_ucontext sees as udata inlen / outlen.
    assert_eq!(
        size_of::<rrxe_get_context>() - size_of::<ibv_get_context>(),
        size_of::<rrxe_uapi::AllocUcontextCmd>()
    );
    assert_eq!(size_of::<rrxe_uapi::AllocUcontextCmd>(), 8);
    assert_eq!(
        size_of::<rrxe_get_context_resp>() - size_of::<ib_uverbs_get_context_resp>(),
        size_of::<rrxe_uapi::AllocUcontextResp>()
    );
    assert_eq!(size_of::<rrxe_uapi::AllocUcontextResp>(), 16);
}

#[test]
fn commands_carry_only_the_defined_driver_udata() {
    use core::mem::size_of;
    use rrxe_uapi::{CreateAhResp, CreateCqResp, CreateQpResp, CreateSrqResp};
    // (name, inlen, outlen) as the kernel sees them: GET_CONTEXT's uABI exchange, the ring
    // announcements of CQ/QP/SRQ and the AH number; no other driver data.
    let expected: &[(&str, usize, usize)] = &[
        ("rrxe_get_context", 8, 16),
        ("rrxe_alloc_pd", 0, 0),
        ("rrxe_reg_mr", 0, 0),
        ("rrxe_create_cq", 0, size_of::<CreateCqResp>()),
        ("rrxe_resize_cq", 0, size_of::<CreateCqResp>()),
        ("rrxe_create_qp", 0, size_of::<CreateQpResp>()),
        ("rrxe_create_qp_ex", 0, size_of::<CreateQpResp>()),
        ("rrxe_create_ah", 0, size_of::<CreateAhResp>()),
        ("rrxe_create_srq", 0, size_of::<CreateSrqResp>()),
    ];
    assert_eq!(DRV_UDATA_LENS, expected);
    assert_eq!(
        (size_of::<CreateCqResp>(), size_of::<CreateQpResp>()),
        (24, 48)
    );
    assert_eq!(
        (size_of::<CreateAhResp>(), size_of::<CreateSrqResp>()),
        (8, 24)
    );
    // The buffers handed to libibverbs: its legacy structs (fact-sheet sizes) plus the driver
    // parts, with no padding in between.
    assert_eq!(size_of::<rrxe_alloc_pd>(), 16);
    assert_eq!(size_of::<rrxe_alloc_pd_resp>(), 4);
    assert_eq!(size_of::<rrxe_reg_mr>(), 48);
    assert_eq!(size_of::<rrxe_reg_mr_resp>(), 12);
    assert_eq!(size_of::<rrxe_create_cq>(), 40);
    assert_eq!(size_of::<rrxe_create_cq_resp>(), 32);
    assert_eq!(size_of::<rrxe_resize_cq>(), 24);
    assert_eq!(size_of::<rrxe_resize_cq_resp>(), 32);
    assert_eq!(size_of::<rrxe_create_qp>(), 64);
    assert_eq!(size_of::<rrxe_create_qp_resp>(), 32 + 48);
    assert_eq!(size_of::<rrxe_create_qp_ex>(), 88);
    assert_eq!(size_of::<rrxe_create_qp_ex_resp>(), 40 + 48);
    assert_eq!(size_of::<rrxe_create_ah_resp>(), 4 + 8);
    assert_eq!(size_of::<rrxe_create_srq>(), 40);
    assert_eq!(size_of::<rrxe_create_srq_resp>(), 16 + 24);
    assert_eq!(size_of::<ibv_modify_qp>(), 120);
    assert_eq!(size_of::<ibv_query_qp>(), 24);
    assert_eq!(size_of::<ibv_modify_srq>(), 24);
    assert_eq!(size_of::<ibv_query_srq>(), 24);
    // The send doorbell (`ibv_cmd_post_send(qp, NULL, ..)`): a 32-byte POST_SEND request
    // with wqe_size = sizeof(struct ib_uverbs_send_wr) and a 4-byte response.
    assert_eq!(size_of::<ibv_post_send>(), 32);
    assert_eq!(size_of::<ib_uverbs_send_wr>(), 56);
    assert_eq!(size_of::<ib_uverbs_post_send_resp>(), 4);
}

#[test]
fn verbs_objects_embed_libibverbs_objects_at_offset_zero() {
    use core::mem::{offset_of, size_of};
    assert_eq!(size_of::<crate::pd::RrxePd>(), size_of::<ibv_pd>());
    assert_eq!(size_of::<crate::pd::RrxeMr>(), 56);
    // verbs_cq (288) plus the ring-and-lock pointer.
    assert_eq!(size_of::<crate::cq::RrxeCq>(), 296);
    // verbs_qp (368) plus the two ring pointers and the builder batch pointer.
    assert_eq!(size_of::<crate::qp::RrxeQp>(), 368 + 24);
    assert_eq!(offset_of!(crate::qp::RrxeQp, sq), 368);
    // verbs_srq (160) plus the ring pointer.
    assert_eq!(size_of::<verbs_srq>(), 160);
    assert_eq!(size_of::<crate::srq::RrxeSrq>(), 168);
    // ibv_ah (24), then ah_num.
    assert_eq!(offset_of!(crate::ah::RrxeAh, ah_num), size_of::<ibv_ah>());
    assert_eq!(offset_of!(verbs_qp, comp_mask), 352);
    assert_eq!(offset_of!(verbs_mr, mr_type), 48);
}

/// The completion and work-request values the kernel writes into (and reads from) the shared
/// rings are declared once, in `rrxe_uapi`; they must be libibverbs' own numbers.
#[test]
fn uapi_ring_values_are_libibverbs_values() {
    use rrxe_uapi::{
        send_flags as sf, wc_flags as wf, wc_opcode as wo, wc_status as ws, wr_opcode as wr,
    };
    let pairs: &[(u32, u32)] = &[
        (ws::SUCCESS, IBV_WC_SUCCESS),
        (ws::LOC_LEN_ERR, IBV_WC_LOC_LEN_ERR),
        (ws::LOC_QP_OP_ERR, IBV_WC_LOC_QP_OP_ERR),
        (ws::LOC_PROT_ERR, IBV_WC_LOC_PROT_ERR),
        (ws::WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR),
        (ws::BAD_RESP_ERR, IBV_WC_BAD_RESP_ERR),
        (ws::LOC_ACCESS_ERR, IBV_WC_LOC_ACCESS_ERR),
        (ws::REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR),
        (ws::REM_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR),
        (ws::REM_OP_ERR, IBV_WC_REM_OP_ERR),
        (ws::RETRY_EXC_ERR, IBV_WC_RETRY_EXC_ERR),
        (ws::RNR_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR),
        (ws::GENERAL_ERR, IBV_WC_GENERAL_ERR),
        (wo::SEND, IBV_WC_SEND),
        (wo::RDMA_WRITE, IBV_WC_RDMA_WRITE),
        (wo::RDMA_READ, IBV_WC_RDMA_READ),
        (wo::COMP_SWAP, IBV_WC_COMP_SWAP),
        (wo::FETCH_ADD, IBV_WC_FETCH_ADD),
        (wo::RECV, IBV_WC_RECV),
        (wo::RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM),
        (wf::GRH, IBV_WC_GRH),
        (wf::WITH_IMM, IBV_WC_WITH_IMM),
        (wr::RDMA_WRITE, IBV_WR_RDMA_WRITE),
        (wr::RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM),
        (wr::SEND, IBV_WR_SEND),
        (wr::SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM),
        (wr::RDMA_READ, IBV_WR_RDMA_READ),
        (wr::ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP),
        (wr::ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD),
        (sf::FENCE, IBV_SEND_FENCE),
        (sf::SIGNALED, IBV_SEND_SIGNALED),
        (sf::SOLICITED, IBV_SEND_SOLICITED),
        (sf::INLINE, IBV_SEND_INLINE),
    ];
    for (i, (ours, theirs)) in pairs.iter().enumerate() {
        assert_eq!(ours, theirs, "pair {i}");
    }
}
