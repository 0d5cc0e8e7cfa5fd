/* SPDX-License-Identifier: GPL-2.0-only */
/* Headers rrxe's bindings are generated from (see Kbuild). */
#include <linux/highmem.h>
#include <linux/netdevice.h>
#include <linux/notifier.h>
#include <linux/scatterlist.h>
#include <linux/skbuff.h>
#include <linux/sysfs.h>
#include <linux/timer.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>
#include <net/route.h>
#include <net/ipv6_stubs.h>
#include <net/ip6_route.h>
#include <net/ip6_checksum.h>
#include <net/udp_tunnel.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>
#include "helpers.h"
