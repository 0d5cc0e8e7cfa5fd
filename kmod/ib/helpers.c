// SPDX-License-Identifier: GPL-2.0-only
/* Wrappers for static inlines; see helpers.h. */
#include <linux/if_vlan.h>
#include <rdma/ib_cache.h>
#include <rdma/uverbs_ioctl.h>
#include "helpers.h"

void rrxe_dev_hold(struct net_device *dev)
{
	dev_hold(dev);
}

void rrxe_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

bool rrxe_netif_running(const struct net_device *dev)
{
	return netif_running(dev);
}

bool rrxe_netif_carrier_ok(const struct net_device *dev)
{
	return netif_carrier_ok(dev);
}

bool rrxe_is_vlan_dev(const struct net_device *dev)
{
	return is_vlan_dev(dev);
}

struct net_device *rrxe_netdev_notifier_info_to_dev(const struct netdev_notifier_info *info)
{
	return netdev_notifier_info_to_dev(info);
}

struct net *rrxe_dev_net(const struct net_device *dev)
{
	return dev_net(dev);
}

/* rdma_read_gid_attr_ndev_rcu() must run inside an RCU read-side section. */
bool rrxe_gid_attr_ndev_is(const struct ib_gid_attr *attr, const struct net_device *dev)
{
	struct net_device *ndev;
	bool same;

	rcu_read_lock();
	ndev = rdma_read_gid_attr_ndev_rcu(attr);
	same = !IS_ERR(ndev) && ndev == dev;
	rcu_read_unlock();
	return same;
}

/* rdma_udata_to_drv_context() without the driver type: the context of a user verb call. */
struct ib_ucontext *rrxe_udata_to_ucontext(struct ib_udata *udata)
{
	return rdma_udata_to_uverbs_attr_bundle(udata)->context;
}
