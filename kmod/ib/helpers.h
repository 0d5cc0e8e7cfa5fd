/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Wrappers for static inline kernel functions that bindgen cannot bind.  This is the only C in
 * rrxe: each wrapper is a one-line call of the inline it is named after, nothing more.
 */
#ifndef RRXE_HELPERS_H
#define RRXE_HELPERS_H

#include <linux/highmem.h>
#include <linux/netdevice.h>
#include <linux/scatterlist.h>
#include <linux/sched/signal.h>
#include <linux/skbuff.h>
#include <linux/timer.h>
#include <linux/workqueue.h>
#include <net/netlink.h>
#include <net/sock.h>
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

/* bh.rs */
void rrxe_local_bh_disable(void);
void rrxe_local_bh_enable(void);
bool rrxe_irqs_disabled(void);
struct nlattr *rrxe_res_table_start(struct sk_buff *msg);
void rrxe_res_table_end(struct sk_buff *msg, struct nlattr *table);
void rrxe_res_table_cancel(struct sk_buff *msg, struct nlattr *table);
void rrxe_cond_resched(void);
bool rrxe_fatal_signal_pending(void);

/* umem.rs */
struct page *rrxe_sg_page(struct scatterlist *sg);
struct page *rrxe_nth_page(struct page *page, unsigned long n);
void *rrxe_kmap_local_page(struct page *page);
void rrxe_kunmap_local(const void *addr);

/* kmem.rs */
bool rrxe_virt_addr_valid(const void *addr);

/* timer.rs */
void rrxe_timer_setup(struct timer_list *timer, void (*func)(struct timer_list *));
unsigned long rrxe_usecs_to_jiffies(unsigned int us);
unsigned long rrxe_jiffies(void);
u64 rrxe_ktime_get_ns(void);
struct ib_device *rrxe_device_to_ibdev(struct device *dev);
unsigned long rrxe_msecs_to_jiffies(unsigned int ms);

/* work.rs */
void rrxe_init_work(struct work_struct *work, void (*func)(struct work_struct *));
bool rrxe_queue_work_highpri(struct work_struct *work);

/* sysfs.rs (sysfs_emit is a static inline without CONFIG_SYSFS) */
int rrxe_sysfs_emit_uint(char *buf, unsigned int v);

/* umem.rs (static inlines without CONFIG_INFINIBAND_USER_MEM) */
struct ib_umem *rrxe_ib_umem_get(struct ib_device *device, unsigned long addr, size_t size,
				 int access);
void rrxe_ib_umem_release(struct ib_umem *umem);

/* odp.rs (static inlines and macros of ib_umem_odp.h, mmu_notifier.h, hmm.h, mutex.h) */
struct ib_umem_odp;
struct mmu_interval_notifier;
struct mmu_notifier_range;
struct mmu_interval_notifier_ops;
struct ib_umem_odp *rrxe_ib_umem_odp_get(struct ib_device *device, unsigned long addr,
					 size_t size, int access,
					 const struct mmu_interval_notifier_ops *ops);
void rrxe_ib_umem_odp_release(struct ib_umem_odp *odp);
int rrxe_ib_umem_odp_map_dma_and_lock(struct ib_umem_odp *odp, u64 start, u64 bcnt,
				      u64 access_mask, bool fault);
void rrxe_ib_umem_odp_unmap_dma_pages(struct ib_umem_odp *odp, u64 start, u64 bound);
struct ib_umem_odp *rrxe_odp_from_notifier(struct mmu_interval_notifier *mni);
bool rrxe_mmu_notifier_range_blockable(const struct mmu_notifier_range *range);
void rrxe_mmu_interval_set_seq(struct mmu_interval_notifier *mni, unsigned long cur_seq);
unsigned long rrxe_mmu_notifier_range_start(const struct mmu_notifier_range *range);
unsigned long rrxe_mmu_notifier_range_end(const struct mmu_notifier_range *range);
unsigned long rrxe_ib_umem_odp_start(struct ib_umem_odp *odp);
unsigned long rrxe_ib_umem_odp_end(struct ib_umem_odp *odp);
void rrxe_odp_mutex_lock(struct ib_umem_odp *odp);
void rrxe_odp_mutex_unlock(struct ib_umem_odp *odp);
u64 rrxe_odp_access_mask(bool writable);
struct page *rrxe_odp_page(struct ib_umem_odp *odp, unsigned long idx, bool write);
bool rrxe_odp_enabled(void);

/* ring.rs */
struct page *rrxe_alloc_page(gfp_t gfp);
void rrxe_free_page(struct page *page);
void *rrxe_vmap_user(struct page **pages, unsigned int count);
void *rrxe_alloc_ring_block(size_t bytes, gfp_t gfp);
void rrxe_free_ring_block(void *addr, size_t bytes);
int rrxe_map_ring_block(struct vm_area_struct *vma, void *addr, size_t bytes);

/* mod.rs */
void rrxe_rcu_read_lock(void);
void rrxe_rcu_read_unlock(void);

/* device.rs */
bool rrxe_ib_device_try_get(struct ib_device *dev);

/* udp.rs */
bool rrxe_check_net(const struct net *net);
int rrxe_udp_sock_create6(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp);
void rrxe_consume_skb(struct sk_buff *skb);
void *rrxe_sk_user_data(const struct sock *sk);
int rrxe_skb_linearize(struct sk_buff *skb);
unsigned char *rrxe_skb_network_header(const struct sk_buff *skb);
void rrxe_kfree_skb(struct sk_buff *skb);
struct sk_buff *rrxe_alloc_skb(unsigned int size, gfp_t gfp);
void rrxe_skb_set_destructor(struct sk_buff *skb, void (*destructor)(struct sk_buff *),
			     void *arg);
void *rrxe_skb_destructor_arg(struct sk_buff *skb);
void rrxe_skb_reserve(struct sk_buff *skb, int len);
int rrxe_ll_reserved_space(const struct net_device *dev);
int rrxe_ip4_dst_hoplimit(const struct dst_entry *dst);
void rrxe_udp_registry_lock(void);
void rrxe_skb_reset_network_header(struct sk_buff *skb);
void rrxe_skb_reset_transport_header(struct sk_buff *skb);
void rrxe_skb_dst_set(struct sk_buff *skb, struct dst_entry *dst);
void rrxe_udp_registry_unlock(void);

#endif
