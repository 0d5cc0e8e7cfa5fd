// SPDX-License-Identifier: GPL-2.0-only
/* Wrappers for static inlines; see helpers.h. */
#include <linux/if_vlan.h>
#include <linux/bottom_half.h>
#include <linux/jiffies.h>
#include <linux/timekeeping.h>
#include <net/net_namespace.h>
#include <net/route.h>
#include <net/udp_tunnel.h>
#include <linux/gfp.h>
#include <linux/vmalloc.h>
#include <linux/mm.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_umem_odp.h>
#include <linux/hmm.h>
#include <linux/mmu_notifier.h>
#include <rdma/ib_cache.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/rdma_netlink.h>
#include <net/netlink.h>
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

void rrxe_local_bh_disable(void)
{
	local_bh_disable();
}

void rrxe_local_bh_enable(void)
{
	local_bh_enable();
}

/* The RDMA_NLDEV_ATTR_DRIVER table of a `rdma resource ... -dd` entry (nla_nest_*: inline). */
struct nlattr *rrxe_res_table_start(struct sk_buff *msg)
{
	return nla_nest_start(msg, RDMA_NLDEV_ATTR_DRIVER);
}

void rrxe_res_table_end(struct sk_buff *msg, struct nlattr *table)
{
	nla_nest_end(msg, table);
}

void rrxe_res_table_cancel(struct sk_buff *msg, struct nlattr *table)
{
	nla_nest_cancel(msg, table);
}

/* irqs_disabled(): a kernel verbs consumer may call us under spin_lock_irqsave(). */
bool rrxe_irqs_disabled(void)
{
	return irqs_disabled();
}

void rrxe_cond_resched(void)
{
	cond_resched();
}

bool rrxe_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

struct page *rrxe_sg_page(struct scatterlist *sg)
{
	return sg_page(sg);
}

struct page *rrxe_nth_page(struct page *page, unsigned long n)
{
	return nth_page(page, n);
}

void *rrxe_kmap_local_page(struct page *page)
{
	return kmap_local_page(page);
}

void rrxe_kunmap_local(const void *addr)
{
	kunmap_local(addr);
}

bool rrxe_virt_addr_valid(const void *addr)
{
	return virt_addr_valid(addr);
}

void rrxe_timer_setup(struct timer_list *timer, void (*func)(struct timer_list *))
{
	timer_setup(timer, func, 0);
}

void rrxe_init_work(struct work_struct *work, void (*func)(struct work_struct *))
{
	INIT_WORK(work, func);
}

bool rrxe_queue_work_highpri(struct work_struct *work)
{
	return queue_work(system_highpri_wq, work);
}

unsigned long rrxe_usecs_to_jiffies(unsigned int us)
{
	return usecs_to_jiffies(us);
}

unsigned long rrxe_jiffies(void)
{
	return READ_ONCE(jiffies);
}

u64 rrxe_ktime_get_ns(void)
{
	return ktime_get_ns();
}

struct ib_device *rrxe_device_to_ibdev(struct device *dev)
{
	return rdma_device_to_ibdev(dev);
}

int rrxe_sysfs_emit_uint(char *buf, unsigned int v)
{
	return sysfs_emit(buf, "%u\n", v);
}

struct ib_umem *rrxe_ib_umem_get(struct ib_device *device, unsigned long addr, size_t size,
				 int access)
{
	return ib_umem_get(device, addr, size, access);
}

void rrxe_ib_umem_release(struct ib_umem *umem)
{
	ib_umem_release(umem);
}

/* alloc_page() is a macro, and alloc_pages_noprof() a static inline without CONFIG_NUMA. */
struct page *rrxe_alloc_page(gfp_t gfp)
{
	return alloc_page(gfp);
}

void rrxe_free_page(struct page *page)
{
	__free_page(page);
}

/*
 * A small ring as one physically contiguous block (alloc_pages_exact: split into order-0 pages,
 * each with its own reference count, so that a user mapping made by rrxe_map_ring_block keeps
 * the pages it maps alive on its own), zeroed and charged per gfp.  No vmap area, no page
 * array: the linear map addresses it.  NULL when no such block is free (no retries, no
 * warning: the caller falls back to rrxe_vmap_user).
 */
void *rrxe_alloc_ring_block(size_t bytes, gfp_t gfp)
{
	return alloc_pages_exact(bytes, gfp | __GFP_ZERO | __GFP_NOWARN | __GFP_NORETRY);
}

/* Drops the block's references to its pages (user mappings may still hold theirs). */
void rrxe_free_ring_block(void *addr, size_t bytes)
{
	free_pages_exact(addr, bytes);
}

/*
 * Maps a block from rrxe_alloc_ring_block into vma from its start, as remap_vmalloc_range()
 * does for a vmap area: each page inserted with its own reference, the VMA neither expanded
 * nor dumped.  -EINVAL when the VMA is larger than the block.
 */
int rrxe_map_ring_block(struct vm_area_struct *vma, void *addr, size_t bytes)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	unsigned long off;
	int ret;

	if (!PAGE_ALIGNED(addr) || size > PAGE_ALIGN(bytes))
		return -EINVAL;
	for (off = 0; off < size; off += PAGE_SIZE) {
		ret = vm_insert_page(vma, vma->vm_start + off, virt_to_page(addr + off));
		if (ret)
			return ret;
	}
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return 0;
}

/*
 * vmap() for memory user space maps with remap_vmalloc_range() (VM_USERMAP); vfree() then
 * drops the pages and frees the array (VM_MAP_PUT_PAGES).  PAGE_KERNEL is not a constant
 * bindgen can see.
 */
void *rrxe_vmap_user(struct page **pages, unsigned int count)
{
	return vmap(pages, count, VM_USERMAP | VM_MAP_PUT_PAGES, PAGE_KERNEL);
}

void rrxe_rcu_read_lock(void)
{
	rcu_read_lock();
}

void rrxe_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

bool rrxe_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

bool rrxe_check_net(const struct net *net)
{
	return check_net(net);
}

/* A static inline (-EPFNOSUPPORT) without CONFIG_IPV6. */
int rrxe_udp_sock_create6(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp)
{
	return udp_sock_create6(net, cfg, sockp);
}

/* consume_skb() is a static inline without CONFIG_TRACEPOINTS. */
void rrxe_consume_skb(struct sk_buff *skb)
{
	consume_skb(skb);
}

unsigned long rrxe_msecs_to_jiffies(unsigned int ms)
{
	return msecs_to_jiffies(ms);
}

/* Called from the UDP receive path, which holds the RCU read lock. */
void *rrxe_sk_user_data(const struct sock *sk)
{
	return rcu_dereference_sk_user_data(sk);
}

int rrxe_skb_linearize(struct sk_buff *skb)
{
	return skb_linearize(skb);
}

unsigned char *rrxe_skb_network_header(const struct sk_buff *skb)
{
	return skb_network_header(skb);
}

void rrxe_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

struct sk_buff *rrxe_alloc_skb(unsigned int size, gfp_t gfp)
{
	return alloc_skb(size, gfp);
}

void rrxe_skb_set_destructor(struct sk_buff *skb, void (*destructor)(struct sk_buff *),
			     void *arg)
{
	skb_shinfo(skb)->destructor_arg = arg;
	skb->destructor = destructor;
}

void *rrxe_skb_destructor_arg(struct sk_buff *skb)
{
	return skb_shinfo(skb)->destructor_arg;
}

void rrxe_skb_reserve(struct sk_buff *skb, int len)
{
	skb_reserve(skb, len);
}

int rrxe_ll_reserved_space(const struct net_device *dev)
{
	return LL_RESERVED_SPACE(dev);
}

int rrxe_ip4_dst_hoplimit(const struct dst_entry *dst)
{
	return ip4_dst_hoplimit(dst);
}

/*
 * The per-namespace UDP socket registry (udp.rs) needs one statically initialised sleeping
 * lock; the Rust kernel crate of 6.12 has no static mutex, so it is DEFINE_MUTEX here.
 */
static DEFINE_MUTEX(rrxe_udp_registry);

void rrxe_udp_registry_lock(void)
{
	mutex_lock(&rrxe_udp_registry);
}

void rrxe_udp_registry_unlock(void)
{
	mutex_unlock(&rrxe_udp_registry);
}

void rrxe_skb_reset_network_header(struct sk_buff *skb)
{
	skb_reset_network_header(skb);
}

void rrxe_skb_reset_transport_header(struct sk_buff *skb)
{
	skb_reset_transport_header(skb);
}

void rrxe_skb_dst_set(struct sk_buff *skb, struct dst_entry *dst)
{
	skb_dst_set(skb, dst);
}

/*
 * odp.rs. Without CONFIG_INFINIBAND_ON_DEMAND_PAGING ib_core has no ODP umems (its
 * ib_umem_odp_get is a static inline answering -EINVAL): these wrappers keep the module
 * building there, and an ODP umem can never be created, so the others are never called.
 */
struct ib_umem_odp *rrxe_ib_umem_odp_get(struct ib_device *device, unsigned long addr,
					 size_t size, int access,
					 const struct mmu_interval_notifier_ops *ops)
{
	return ib_umem_odp_get(device, addr, size, access, ops);
}

void rrxe_ib_umem_odp_release(struct ib_umem_odp *odp)
{
	ib_umem_odp_release(odp);
}

#ifdef CONFIG_INFINIBAND_ON_DEMAND_PAGING
int rrxe_ib_umem_odp_map_dma_and_lock(struct ib_umem_odp *odp, u64 start, u64 bcnt,
				      u64 access_mask, bool fault)
{
	return ib_umem_odp_map_dma_and_lock(odp, start, bcnt, access_mask, fault);
}

void rrxe_ib_umem_odp_unmap_dma_pages(struct ib_umem_odp *odp, u64 start, u64 bound)
{
	ib_umem_odp_unmap_dma_pages(odp, start, bound);
}

struct ib_umem_odp *rrxe_odp_from_notifier(struct mmu_interval_notifier *mni)
{
	return container_of(mni, struct ib_umem_odp, notifier);
}

bool rrxe_mmu_notifier_range_blockable(const struct mmu_notifier_range *range)
{
	return mmu_notifier_range_blockable(range);
}

void rrxe_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long cur_seq)
{
	mmu_interval_set_seq(mni, cur_seq);
}

unsigned long rrxe_mmu_notifier_range_start(const struct mmu_notifier_range *range)
{
	return range->start;
}

unsigned long rrxe_mmu_notifier_range_end(const struct mmu_notifier_range *range)
{
	return range->end;
}

unsigned long rrxe_ib_umem_odp_start(struct ib_umem_odp *odp)
{
	return ib_umem_start(odp);
}

unsigned long rrxe_ib_umem_odp_end(struct ib_umem_odp *odp)
{
	return ib_umem_end(odp);
}

void rrxe_odp_mutex_lock(struct ib_umem_odp *odp)
{
	mutex_lock(&odp->umem_mutex);
}

void rrxe_odp_mutex_unlock(struct ib_umem_odp *odp)
{
	mutex_unlock(&odp->umem_mutex);
}

u64 rrxe_odp_access_mask(bool writable)
{
	return ODP_READ_ALLOWED_BIT | (writable ? ODP_WRITE_ALLOWED_BIT : 0);
}

/*
 * The page behind pfn_list[idx] if HMM reported it valid (and, with @write, writable), else
 * NULL; under umem_mutex.
 */
struct page *rrxe_odp_page(struct ib_umem_odp *odp, unsigned long idx, bool write)
{
	unsigned long pfn = odp->pfn_list[idx];

	if (!(pfn & HMM_PFN_VALID) || (write && !(pfn & HMM_PFN_WRITE)))
		return NULL;
	return hmm_pfn_to_page(pfn);
}
#else
int rrxe_ib_umem_odp_map_dma_and_lock(struct ib_umem_odp *odp, u64 start, u64 bcnt,
				      u64 access_mask, bool fault)
{
	return -EOPNOTSUPP;
}

void rrxe_ib_umem_odp_unmap_dma_pages(struct ib_umem_odp *odp, u64 start, u64 bound) {}

struct ib_umem_odp *rrxe_odp_from_notifier(struct mmu_interval_notifier *mni) { return NULL; }
bool rrxe_mmu_notifier_range_blockable(const struct mmu_notifier_range *range) { return true; }
void rrxe_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long cur_seq) {}
unsigned long rrxe_mmu_notifier_range_start(const struct mmu_notifier_range *range) { return 0; }
unsigned long rrxe_mmu_notifier_range_end(const struct mmu_notifier_range *range) { return 0; }
unsigned long rrxe_ib_umem_odp_start(struct ib_umem_odp *odp) { return 0; }
unsigned long rrxe_ib_umem_odp_end(struct ib_umem_odp *odp) { return 0; }
void rrxe_odp_mutex_lock(struct ib_umem_odp *odp) {}
void rrxe_odp_mutex_unlock(struct ib_umem_odp *odp) {}
u64 rrxe_odp_access_mask(bool writable) { return 0; }
struct page *rrxe_odp_page(struct ib_umem_odp *odp, unsigned long idx, bool write)
{
	return NULL;
}
#endif

/* Whether ib_core has ODP umems (CONFIG_INFINIBAND_ON_DEMAND_PAGING). */
bool rrxe_odp_enabled(void)
{
	return IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING);
}
