/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Wrappers for static inline kernel functions that bindgen cannot bind.  This is the only C in
 * rrxe: each wrapper is a one-line call of the inline it is named after, nothing more.
 */
#ifndef RRXE_HELPERS_H
#define RRXE_HELPERS_H

#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

void rrxe_dev_hold(struct net_device *dev);
void rrxe_dev_put(struct net_device *dev);
bool rrxe_netif_running(const struct net_device *dev);
bool rrxe_netif_carrier_ok(const struct net_device *dev);
bool rrxe_is_vlan_dev(const struct net_device *dev);
struct net_device *rrxe_netdev_notifier_info_to_dev(const struct netdev_notifier_info *info);
struct net *rrxe_dev_net(const struct net_device *dev);
struct ib_ucontext *rrxe_udata_to_ucontext(struct ib_udata *udata);
bool rrxe_gid_attr_ndev_is(const struct ib_gid_attr *attr, const struct net_device *dev);

#endif
