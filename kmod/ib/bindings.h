/* SPDX-License-Identifier: GPL-2.0-only */
/* Headers rrxe's bindings are generated from (see Kbuild). */
#include <linux/netdevice.h>
#include <linux/notifier.h>
#include <linux/sysfs.h>
#include <linux/vmalloc.h>
#include <net/route.h>
#include <net/ipv6_stubs.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_umem.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>
#include "helpers.h"
