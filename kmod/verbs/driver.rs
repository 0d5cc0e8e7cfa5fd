// SPDX-License-Identifier: GPL-2.0-only
//! The driver's dispatch: ib_core's device operations ([`IbDriver`]) routed to the object files,
//! and the device-level verbs (query_device, query_port, port immutables, P_Keys, user
//! contexts, counters).

use super::{
    ah, cq,
    device::{Rrxe, RrxeContext, RrxeDev},
    mr, mw, pd, qp, srq,
};
use crate::ib::{
    bindings as b,
    device::{Device, DeviceAttr, IbDriver, PortAttr, PortImmutable, QpLinks},
    kmem::{KernelVirt, MappedPage},
    objects::{AddressVector, CqInit, CqRef, MrArgs, MrKeys, QpInit, QpSnapshot, SrqAttr, SrqRef},
    objects::{KSendWr, Wc},
    restrack::ResTable,
    udata::Udata,
};
use crate::logic::{limits as lim, port, qp_attr::ModifyRequest, stats};
use crate::uapi::{self, Sge};
use core::sync::atomic::Ordering;
use kernel::prelude::*;

const PORT: u32 = 1;

fn check_port(port: u32) -> Result {
    if port == PORT {
        Ok(())
    } else {
        Err(EINVAL)
    }
}

impl IbDriver for Rrxe {
    type Data = RrxeDev;
    type Context = RrxeContext;
    type Pd = pd::RrxePd;
    type Cq = cq::RrxeCq;
    type Qp = qp::RrxeQp;
    type Mr = mr::RrxeMr;
    type Mw = mw::RrxeMw;
    type Ah = ah::RrxeAh;
    type Srq = srq::RrxeSrq;

    fn alloc_pd(dev: &Device<Self>, udata: Option<&Udata>) -> Result<Self::Pd> {
        pd::alloc(dev, udata)
    }

    fn dealloc_pd(dev: &Device<Self>, p: &Self::Pd) {
        pd::dealloc(dev, p)
    }

    fn create_cq(
        dev: &Device<Self>,
        init: &CqInit,
        udata: Option<&Udata>,
        ev: CqRef,
    ) -> Result<(Self::Cq, u32)> {
        cq::create(dev, init, udata, ev)
    }

    fn destroy_cq(dev: &Device<Self>, c: &Self::Cq) {
        cq::destroy(dev, c)
    }

    fn resize_cq(dev: &Device<Self>, c: &Self::Cq, cqe: u32, udata: Option<&Udata>) -> Result<u32> {
        cq::resize(dev, c, cqe, udata)
    }

    fn create_qp(
        dev: &Device<Self>,
        p: &Self::Pd,
        init: &mut QpInit,
        udata: Option<&Udata>,
        links: QpLinks<'_, Self>,
    ) -> Result<(Self::Qp, u32)> {
        qp::create(dev, p, init, udata, links)
    }

    fn modify_qp(
        dev: &Device<Self>,
        q: &Self::Qp,
        req: &ModifyRequest,
        av: Option<&AddressVector>,
        udata: Option<&Udata>,
    ) -> Result {
        q.modify(dev, req, av, udata)
    }

    fn query_qp(dev: &Device<Self>, q: &Self::Qp) -> Result<QpSnapshot> {
        qp::query(dev, q)
    }

    fn destroy_qp(dev: &Device<Self>, q: Self::Qp) {
        qp::destroy(dev, q)
    }

    fn reg_user_mr(
        dev: &Device<Self>,
        p: &Self::Pd,
        args: &MrArgs,
        udata: Option<&Udata>,
    ) -> Result<(Self::Mr, MrKeys)> {
        mr::reg_user(dev, p, args, udata)
    }

    fn dereg_mr(dev: &Device<Self>, m: &Self::Mr) -> Result {
        mr::dereg(dev, m)
    }

    fn advise_mr(
        dev: &Device<Self>,
        pd: &Self::Pd,
        advice: u32,
        _flags: u32,
        sges: &[b::ib_sge],
    ) -> Result {
        mr::advise(dev, pd, advice, sges)
    }

    fn alloc_mw(
        dev: &Device<Self>,
        p: &Self::Pd,
        ty: u32,
        udata: Option<&Udata>,
    ) -> Result<(Self::Mw, u32)> {
        mw::alloc(dev, p, ty, udata)
    }

    fn dealloc_mw(dev: &Device<Self>, w: &Self::Mw) {
        mw::dealloc(dev, w)
    }

    fn create_ah(
        dev: &Device<Self>,
        p: &Self::Pd,
        av: &AddressVector,
        udata: Option<&Udata>,
        sleepable: bool,
    ) -> Result<Self::Ah> {
        ah::create(dev, p, av, udata, sleepable)
    }

    fn destroy_ah(dev: &Device<Self>, a: &Self::Ah, sleepable: bool) {
        ah::destroy(dev, a, sleepable)
    }

    fn attach_mcast(dev: &Device<Self>, q: &Self::Qp, gid: [u8; 16]) -> Result {
        qp::attach_mcast(dev, q, gid)
    }

    fn detach_mcast(dev: &Device<Self>, q: &Self::Qp, gid: [u8; 16]) -> Result {
        qp::detach_mcast(dev, q, gid)
    }

    fn create_srq(
        dev: &Device<Self>,
        p: &Self::Pd,
        attr: &mut SrqAttr,
        udata: Option<&Udata>,
        ev: SrqRef,
    ) -> Result<Self::Srq> {
        srq::create(dev, p, attr, udata, ev)
    }

    fn modify_srq(
        dev: &Device<Self>,
        s: &Self::Srq,
        attr: &SrqAttr,
        mask: u32,
        udata: Option<&Udata>,
    ) -> Result {
        srq::modify(dev, s, attr, mask, udata)
    }

    fn query_srq(dev: &Device<Self>, s: &Self::Srq) -> Result<SrqAttr> {
        srq::query(dev, s)
    }

    fn destroy_srq(dev: &Device<Self>, s: &Self::Srq) {
        srq::destroy(dev, s)
    }

    fn post_send(_dev: &Device<Self>, q: &Self::Qp) -> Result {
        q.inner.doorbell()
    }

    fn req_notify_cq(dev: &Device<Self>, c: &Self::Cq, solicited_only: bool) -> Result<bool> {
        cq::req_notify(dev, c, solicited_only)
    }

    fn get_dma_mr(
        dev: &Device<Self>,
        p: &Self::Pd,
        mem: KernelVirt,
        access: u32,
    ) -> Result<(Self::Mr, MrKeys)> {
        mr::get_dma(dev, p, mem, access)
    }

    fn alloc_mr(dev: &Device<Self>, p: &Self::Pd, max_num_sg: u32) -> Result<(Self::Mr, MrKeys)> {
        mr::alloc_fast(dev, p, max_num_sg)
    }

    fn mr_map_begin(dev: &Device<Self>, m: &Self::Mr, page_size: u32) -> Result {
        mr::map_begin(dev, m, page_size)
    }

    fn mr_map_page(dev: &Device<Self>, m: &Self::Mr, page: MappedPage) -> Result {
        mr::map_page(dev, m, page)
    }

    fn post_send_kernel(_dev: &Device<Self>, q: &Self::Qp, wr: &KSendWr<'_, Self::Ah>) -> Result {
        qp::post_send_kernel(q, wr)
    }

    fn kernel_doorbell(_dev: &Device<Self>, q: &Self::Qp) {
        q.inner.kernel_doorbell()
    }

    fn post_recv_kernel(_dev: &Device<Self>, q: &Self::Qp, wr_id: u64, sges: &[Sge]) -> Result {
        qp::post_recv_kernel(q, wr_id, sges)
    }

    fn post_srq_recv_kernel(
        _dev: &Device<Self>,
        s: &Self::Srq,
        wr_id: u64,
        sges: &[Sge],
    ) -> Result {
        s.inner.post_kernel(wr_id, sges)
    }

    fn poll_cq(_dev: &Device<Self>, c: &Self::Cq, out: &mut [Wc]) -> usize {
        c.inner.poll_kernel(out)
    }

    fn res_qp(_dev: &Device<Self>, q: &Self::Qp, t: &mut ResTable) -> Result {
        qp::res(q, t)
    }

    fn res_cq(_dev: &Device<Self>, c: &Self::Cq, t: &mut ResTable) -> Result {
        cq::res(c, t)
    }

    fn res_mr(dev: &Device<Self>, m: &Self::Mr, t: &mut ResTable) -> Result {
        mr::res(dev, m, t)
    }

    fn query_device(dev: &Device<Self>, attr: &mut DeviceAttr, udata: Option<&Udata>) -> Result {
        // No driver-private request or response is defined for query_device.
        if let Some(u) = udata {
            if u.inlen() != 0 || u.outlen() != 0 {
                return Err(EINVAL);
            }
        }
        let guid = dev
            .netdev()
            .mac()
            .map(crate::logic::guid::node_guid_from_mac)
            .unwrap_or_default();
        attr.fw_ver = lim::FW_VER;
        attr.sys_image_guid = u64::from_ne_bytes(guid);
        attr.max_mr_size = lim::MAX_MR_SIZE;
        attr.page_size_cap = !(kernel::page::PAGE_SIZE as u64 - 1);
        attr.vendor_id = uapi::VENDOR_ID;
        attr.vendor_part_id = uapi::VENDOR_PART_ID;
        attr.hw_ver = uapi::HW_VER;
        attr.max_qp = lim::MAX_QP as i32;
        attr.max_qp_wr = lim::MAX_QP_WR as i32;
        attr.device_cap_flags = (b::ib_device_cap_flags_IB_DEVICE_PORT_ACTIVE_EVENT
            | b::ib_device_cap_flags_IB_DEVICE_SYS_IMAGE_GUID
            | b::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN
            // Fast registration, local and remote invalidation.
            | b::ib_device_cap_flags_IB_DEVICE_MEM_MGT_EXTENSIONS
            // Memory windows, type 1 and type 2B (as rdma_rxe).
            | b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW
            | b::ib_device_cap_flags_IB_DEVICE_MEM_WINDOW_TYPE_2B
            // IBA 1.5 memory placement: RDMA FLUSH with global visibility (persistence needs
            // persistent memory, which rrxe does not register) and ATOMIC WRITE.
            | b::ib_device_cap_flags_IB_DEVICE_FLUSH_GLOBAL
            | b::ib_device_cap_flags_IB_DEVICE_ATOMIC_WRITE) as u64;
        attr.max_fast_reg_page_list_len = lim::MAX_FAST_REG_PAGES;
        // Lets `rdma link delete` unregister the device.
        attr.kernel_cap_flags = b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
        // Explicit on-demand paging (docs/odp.md), where the kernel has ODP umems: RC's every
        // operation and receives (SRQ ones too); UD sends (a UD receive that finds its page
        // absent is lost). No implicit ODP.
        if crate::ib::odp::enabled() {
            attr.kernel_cap_flags |= b::ib_kernel_cap_flags_IBK_ON_DEMAND_PAGING as u64;
            attr.odp_caps.general_caps = b::ib_odp_general_cap_bits_IB_ODP_SUPPORT as u64;
            attr.odp_caps.per_transport_caps.rc_odp_caps =
                b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND
                    | b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_RECV
                    | b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_WRITE
                    | b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_READ
                    | b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_ATOMIC
                    | b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SRQ_RECV;
            attr.odp_caps.per_transport_caps.ud_odp_caps =
                b::ib_odp_transport_cap_bits_IB_ODP_SUPPORT_SEND;
        }
        attr.max_send_sge = lim::MAX_SGE as i32;
        attr.max_recv_sge = lim::MAX_SGE as i32;
        attr.max_sge_rd = lim::MAX_SGE_RD as i32;
        attr.max_cq = lim::MAX_CQ as i32;
        attr.max_cqe = lim::MAX_CQE as i32;
        attr.max_mr = lim::MAX_MR as i32;
        attr.max_mw = lim::MAX_MW as i32;
        attr.max_pd = lim::MAX_PD as i32;
        attr.max_qp_rd_atom = lim::MAX_QP_RD_ATOM as i32;
        attr.max_res_rd_atom = lim::MAX_RES_RD_ATOM as i32;
        attr.max_qp_init_rd_atom = lim::MAX_QP_INIT_RD_ATOM as i32;
        attr.atomic_cap = b::ib_atomic_cap_IB_ATOMIC_HCA;
        attr.max_ah = lim::MAX_AH as i32;
        attr.max_srq = lim::MAX_SRQ as i32;
        attr.max_mcast_grp = lim::MAX_MCAST_GRP as i32;
        attr.max_mcast_qp_attach = lim::MAX_MCAST_QP_ATTACH as i32;
        attr.max_total_mcast_qp_attach = lim::MAX_TOTAL_MCAST_QP_ATTACH as i32;
        attr.max_srq_wr = lim::MAX_SRQ_WR as i32;
        attr.max_srq_sge = lim::MAX_SRQ_SGE as i32;
        attr.max_pkeys = lim::PKEY_TBL_LEN;
        attr.local_ca_ack_delay = lim::LOCAL_CA_ACK_DELAY;
        Ok(())
    }

    fn query_port(dev: &Device<Self>, port_num: u32, attr: &mut PortAttr) -> Result {
        check_port(port_num)?;
        let link = dev.netdev().link_facts();
        let (state, phys) = port::port_state(link);
        attr.state = state as u32;
        attr.phys_state = phys as u8;
        attr.max_mtu = port::IbMtu::MAX as u32;
        attr.active_mtu =
            port::active_mtu_for_netdev_mtu(link.mtu).unwrap_or(port::IbMtu::Mtu256) as u32;
        attr.phys_mtu = link.mtu;
        attr.gid_tbl_len = lim::GID_TBL_LEN as i32;
        attr.port_cap_flags = b::ib_port_capability_mask_bits_IB_PORT_CM_SUP;
        attr.max_msg_sz = lim::MAX_MSG_SZ;
        attr.pkey_tbl_len = lim::PKEY_TBL_LEN;
        attr.max_vl_num = 1;
        let (speed, width) = dev.eth_speed(port_num)?;
        attr.active_speed = speed;
        attr.active_width = width;
        Ok(())
    }

    fn port_immutable(_dev: &Device<Self>, port_num: u32) -> Result<PortImmutable> {
        check_port(port_num)?;
        Ok(PortImmutable {
            pkey_tbl_len: lim::PKEY_TBL_LEN as i32,
            gid_tbl_len: lim::GID_TBL_LEN as i32,
            // RoCEv2 only: ib_core then fills the GID table from the netdev's IP addresses.
            core_cap_flags: b::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP,
            max_mad_size: lim::IB_MGMT_MAD_SIZE,
        })
    }

    fn query_pkey(_dev: &Device<Self>, port_num: u32, index: u16) -> Result<u16> {
        check_port(port_num)?;
        if index < lim::PKEY_TBL_LEN {
            Ok(lim::DEFAULT_PKEY)
        } else {
            Err(EINVAL)
        }
    }

    fn alloc_ucontext(dev: &Device<Self>, udata: &Udata) -> Result<RrxeContext> {
        let cmd: uapi::AllocUcontextCmd = udata.read_cmd()?;
        // A provider that announces another uABI would misread every later response.
        if udata.inlen() >= core::mem::size_of::<uapi::AllocUcontextCmd>()
            && cmd.uabi_version != uapi::UABI_VERSION
        {
            // Any process can ask, as often as it likes: rate-limited.
            if crate::ib::printk_ratelimit() {
                pr_info!(
                    "{}: refusing a context for uABI {} (this module speaks {})\n",
                    dev.name(),
                    cmd.uabi_version,
                    uapi::UABI_VERSION
                );
            }
            return Err(crate::ib::eproto());
        }
        // Same version, different ring or command layouts (a provider and a module built from
        // different trees): refused the same way.
        if cmd.layout != uapi::LAYOUT_FINGERPRINT {
            if crate::ib::printk_ratelimit() {
                pr_info!(
                    "{}: refusing a context for ABI layout {:#010x} (this module's is {:#010x}): provider and module come from different builds\n",
                    dev.name(),
                    cmd.layout,
                    uapi::LAYOUT_FINGERPRINT
                );
            }
            return Err(crate::ib::eproto());
        }
        udata.respond(&uapi::AllocUcontextResp {
            magic: uapi::UABI_MAGIC,
            uabi_version: uapi::UABI_VERSION,
            max_inline_data: lim::MAX_INLINE_DATA,
            layout: uapi::LAYOUT_FINGERPRINT,
        })?;
        Ok(RrxeContext)
    }

    fn dcqcn_show(dev: &Device<Self>, out: &mut [u8]) -> usize {
        dev.data().fabric.dcqcn_settings().show(out)
    }

    fn dcqcn_store(dev: &Device<Self>, input: &[u8]) -> Result {
        dev.data().fabric.set_dcqcn(input)
    }

    fn hw_stats(dev: &Device<Self>) -> [u64; stats::COUNT] {
        let mut v = dev.data().stats.snapshot();
        let f = &dev.data().fabric;
        v[stats::Stat::TeardownGracePeriods.index()] =
            f.qps.grace_periods() + f.mrs.grace_periods() + f.mws.grace_periods();
        v
    }

    fn link_changed(dev: &Device<Self>) {
        let (state, _) = port::port_state(dev.netdev().link_facts());
        let active = state == port::PortState::Active;
        if dev.data().port_active.swap(active, Ordering::AcqRel) != active {
            dev.dispatch_port_event(PORT, active);
        }
    }
}
