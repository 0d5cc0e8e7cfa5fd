// SPDX-License-Identifier: GPL-2.0-only
//! Device-level verbs: query_device, query_port, port immutables, P_Keys, user contexts.

use crate::ib::{
    bindings as b,
    device::{Device, DeviceAttr, IbDriver, PortAttr, PortImmutable},
    udata::Udata,
};
use crate::logic::{limits as lim, port};
use crate::uapi;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::prelude::*;

/// The rrxe driver.
pub(crate) struct Rrxe;

/// Per-device state.
pub(crate) struct RrxeDev {
    /// The port state last reported to ib_core, so that events are sent on changes only.
    port_active: AtomicBool,
}

impl RrxeDev {
    pub(crate) fn new(active: bool) -> Self {
        RrxeDev { port_active: AtomicBool::new(active) }
    }
}

/// Per-context state (grows with the data path: mmap entries, doorbells).
pub(crate) struct RrxeContext;

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

    fn query_device(dev: &Device<Self>, attr: &mut DeviceAttr, udata: Option<&Udata>) -> Result {
        // No driver-private request or response is defined for query_device.
        if let Some(u) = udata {
            if u.inlen() != 0 || u.outlen() != 0 {
                return Err(EINVAL);
            }
        }
        let guid = dev.netdev().mac().map(crate::logic::guid::node_guid_from_mac).unwrap_or_default();
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
            | b::ib_device_cap_flags_IB_DEVICE_RC_RNR_NAK_GEN) as u64;
        // Lets `rdma link delete` unregister the device.
        attr.kernel_cap_flags = b::ib_kernel_cap_flags_IBK_ALLOW_USER_UNREG as u64;
        attr.max_send_sge = lim::MAX_SGE as i32;
        attr.max_recv_sge = lim::MAX_SGE as i32;
        attr.max_sge_rd = lim::MAX_SGE_RD as i32;
        attr.max_cq = lim::MAX_CQ as i32;
        attr.max_cqe = lim::MAX_CQE as i32;
        attr.max_mr = lim::MAX_MR as i32;
        attr.max_pd = lim::MAX_PD as i32;
        attr.max_qp_rd_atom = lim::MAX_QP_RD_ATOM as i32;
        attr.max_res_rd_atom = lim::MAX_RES_RD_ATOM as i32;
        attr.max_qp_init_rd_atom = lim::MAX_QP_INIT_RD_ATOM as i32;
        attr.atomic_cap = b::ib_atomic_cap_IB_ATOMIC_HCA;
        attr.max_ah = lim::MAX_AH as i32;
        attr.max_srq = lim::MAX_SRQ as i32;
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
        attr.active_mtu = port::active_mtu_for_netdev_mtu(link.mtu).unwrap_or(port::IbMtu::Mtu256) as u32;
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
            pr_info!(
                "{}: refusing a context for uABI {} (this module speaks {})\n",
                dev.name(),
                cmd.uabi_version,
                uapi::UABI_VERSION
            );
            return Err(crate::ib::eproto());
        }
        if cmd.reserved != 0 {
            return Err(EINVAL);
        }
        udata.respond(&uapi::AllocUcontextResp {
            magic: uapi::UABI_MAGIC,
            uabi_version: uapi::UABI_VERSION,
            max_inline_data: lim::MAX_INLINE_DATA,
            reserved: 0,
        })?;
        Ok(RrxeContext)
    }

    fn mmap(_dev: &Device<Self>, _ctx: &RrxeContext, _pgoff: u64, _len: u64) -> Result {
        // Nothing is mappable yet: refuse every offset.
        Err(EINVAL)
    }

    fn link_changed(dev: &Device<Self>) {
        let (state, _) = port::port_state(dev.netdev().link_facts());
        let active = state == port::PortState::Active;
        if dev.data().port_active.swap(active, Ordering::AcqRel) != active {
            dev.dispatch_port_event(PORT, active);
        }
    }
}
