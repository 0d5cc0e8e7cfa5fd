// SPDX-License-Identifier: GPL-2.0-only
//! `rdma link add NAME type rrxe netdev IF`.

use super::device::{Rrxe, RrxeDev};
use crate::ib::{
    device::{Device, DeviceIdentity, Registry},
    link::LinkDriver,
    netdev::NetDev,
};
use crate::logic::{guid, limits as lim, link, port};
use crate::uapi;
use kernel::{c_str, prelude::*, sync::Arc};

/// The link handler: creates devices into the registry.
pub(crate) struct Links {
    registry: Arc<Registry<Rrxe>>,
}

impl Links {
    pub(crate) fn new(registry: Arc<Registry<Rrxe>>) -> Self {
        Links { registry }
    }
}

fn refuse(name: &CStr, netdev: &NetDev, why: link::LinkError) -> Error {
    pr_info!(
        "rdma link add {} netdev {}: refused ({:?})\n",
        name,
        netdev.name(),
        why
    );
    Error::from_errno(-why.errno())
}

impl LinkDriver for Links {
    const TYPE: &'static CStr = c_str!("rrxe");

    fn newlink(&self, ibdev_name: &CStr, netdev: &NetDev) -> Result {
        link::check_ibdev_name(ibdev_name.as_bytes()).map_err(|e| refuse(ibdev_name, netdev, e))?;
        link::check_netdev(netdev.kind()).map_err(|e| refuse(ibdev_name, netdev, e))?;
        let mac = netdev
            .mac()
            .ok_or_else(|| refuse(ibdev_name, netdev, link::LinkError::NotEthernet))?;
        let id = DeviceIdentity {
            node_guid_be: guid::node_guid_from_mac(mac),
            node_desc: b"rrxe",
            phys_port_cnt: lim::PHYS_PORT_CNT,
            num_comp_vectors: lim::NUM_COMP_VECTORS,
            uverbs_abi_ver: uapi::UVERBS_ABI_VERSION,
        };
        let active = port::port_state(netdev.link_facts()).0 == port::PortState::Active;
        Device::<Rrxe>::register(
            &self.registry,
            ibdev_name,
            netdev,
            &id,
            RrxeDev::new(active, netdev)?,
        )
        .map_err(|e| {
            if e == EEXIST {
                refuse(ibdev_name, netdev, link::LinkError::Exists)
            } else {
                pr_info!(
                    "rdma link add {} netdev {}: error {:?}\n",
                    ibdev_name,
                    netdev.name(),
                    e
                );
                e
            }
        })?;
        pr_info!(
            "{}: bound to {} (ifindex {}, mtu {})\n",
            ibdev_name,
            netdev.name(),
            netdev.ifindex(),
            netdev.mtu()
        );
        Ok(())
    }
}
