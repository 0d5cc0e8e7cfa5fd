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
