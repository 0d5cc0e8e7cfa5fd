// SPDX-License-Identifier: GPL-2.0-only
//! Registering driver `T` with ib_core: the `ib_device_ops` table (the device callbacks of
//! [`super::device`], the object trampolines of [`super::ops`] with the kernel verbs and
//! restrack entries, the sysfs group of [`super::sysfs`]) and the [`Registry`] that installs
//! it in each device `T` registers.

use super::bindings as b;
use super::device::{Device, DeviceOps, IbDriver, Registry, Ucontext};
use core::mem::size_of;
use kernel::{prelude::*, sync::Arc, ThisModule};

/// An empty registry for driver `T`, whose devices will be owned by `module`.
pub(crate) fn registry<T: IbDriver>(module: &'static ThisModule) -> Result<Arc<Registry<T>>> {
    Registry::new(DeviceOps(device_ops::<T>(module)))
}

/// The ops table of driver `T` (the uverbs ABI version is set per device at registration).
fn device_ops<T: IbDriver>(module: &'static ThisModule) -> b::ib_device_ops {
    let mut ops = b::ib_device_ops {
        owner: module.as_ptr().cast(),
        driver_id: b::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
        size_ib_ucontext: size_of::<Ucontext<T>>(),
        device_group: super::sysfs::device_group::<T>(),
        dealloc_driver: Some(Device::<T>::dealloc_driver_callback),
        query_device: Some(Device::<T>::query_device_callback),
        query_port: Some(Device::<T>::query_port_callback),
        get_port_immutable: Some(Device::<T>::get_port_immutable_callback),
        get_link_layer: Some(Device::<T>::get_link_layer_callback),
        query_pkey: Some(Device::<T>::query_pkey_callback),
        alloc_ucontext: Some(Device::<T>::alloc_ucontext_callback),
        dealloc_ucontext: Some(Device::<T>::dealloc_ucontext_callback),
        disassociate_ucontext: Some(Device::<T>::disassociate_ucontext_callback),
        mmap: Some(Device::<T>::mmap_callback),
        mmap_free: Some(super::ring::mmap_free),
        alloc_hw_port_stats: Some(Device::<T>::alloc_hw_port_stats_callback),
        get_hw_stats: Some(Device::<T>::get_hw_stats_callback),
        ..Default::default()
    };
    super::ops::fill_ops::<T>(&mut ops);
    ops
}
