// SPDX-License-Identifier: GPL-2.0-only
/* Wrappers for static inlines; see helpers.h. */
#include <linux/if_vlan.h>
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
