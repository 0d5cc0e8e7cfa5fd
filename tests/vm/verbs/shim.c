/* Out-of-line wrappers of the <infiniband/verbs.h> static inline verbs the test needs, so
 * that Rust calls exactly what a C application compiled against rdma-core 44 would. */
#include <infiniband/verbs.h>

int vt_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return ibv_query_port(ctx, port, attr);
}

int vt_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		    struct ibv_gid_entry *entry)
{
	return ibv_query_gid_ex(ctx, port, index, entry, 0);
}

struct ibv_qp *vt_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	return ibv_create_qp_ex(ctx, attr);
}

struct ibv_xrcd *vt_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr)
{
	return ibv_open_xrcd(ctx, attr);
}

int vt_close_xrcd(struct ibv_xrcd *xrcd)
{
	return ibv_close_xrcd(xrcd);
}

/* Data path (tests/vm/verbs/src/bin/rrxe-*.rs): the inline fast-path verbs. */
int vt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return ibv_post_send(qp, wr, bad);
}

int vt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	return ibv_post_recv(qp, wr, bad);
}

int vt_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, num_entries, wc);
}

int vt_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

/* rrxe-extended: ibv_create_cq_ex() is a static inline. */
struct ibv_cq_ex *vt_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	return ibv_create_cq_ex(ctx, attr);
}

/* rrxe-iba15: device capabilities beyond 32 bits, memory windows (the rdma_rxe peer). */
int vt_query_device_ex(struct ibv_context *ctx, struct ibv_device_attr_ex *attr)
{
	return ibv_query_device_ex(ctx, NULL, attr);
}

struct ibv_mw *vt_alloc_mw(struct ibv_pd *pd, int type)
{
	return ibv_alloc_mw(pd, (enum ibv_mw_type)type);
}

int vt_dealloc_mw(struct ibv_mw *mw)
{
	return ibv_dealloc_mw(mw);
}

int vt_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind)
{
	return ibv_bind_mw(qp, mw, mw_bind);
}
