/*
 * Control-path smoke test of the rrxe provider against the real module (run in the test VM):
 * every control verb once, the expected failures, and everything destroyed again, so that
 * valgrind can vouch for the provider's allocations.
 *
 *   gcc -O1 -g -Wall -o /tmp/control-smoke provider/tools/control-smoke.c -libverbs
 *   scripts/vm-run --file /tmp/control-smoke -- valgrind --leak-check=full \
 *       --errors-for-leak-kinds=definite --error-exitcode=9 ./control-smoke rrxe0
 *
 * Prints one line per step; exits non-zero on the first unexpected result.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failures;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (cond) {                                                     \
			printf("ok   ");                                        \
		} else {                                                        \
			printf("FAIL ");                                        \
			failures++;                                             \
		}                                                               \
		printf(__VA_ARGS__);                                            \
		printf("\n");                                                   \
		fflush(stdout);                                                 \
	} while (0)

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	return ibv_create_qp(pd, &a);
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "rrxe0";
	struct ibv_device **list = ibv_get_device_list(NULL), *dev = NULL;
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), want))
			dev = list[i];
	if (!dev) {
		printf("FAIL no device %s\n", want);
		return 2;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	CHECK(ctx, "open %s", want);
	if (!ctx)
		return 2;
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(ctx, &da), "query_device max_cqe %d max_qp_wr %d", da.max_cqe, da.max_qp_wr);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd handle %u", pd ? pd->handle : 0);

	size_t len = 1 << 16;
	void *buf = calloc(1, len);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, access);
	CHECK(mr, "reg_mr (with RELAXED_ORDERING) lkey %#x rkey %#x errno %d", mr ? mr->lkey : 0,
	      mr ? mr->rkey : 0, mr ? 0 : errno);
	struct ibv_mr *bad = ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_WRITE);
	CHECK(!bad && errno == EINVAL, "reg_mr REMOTE_WRITE without LOCAL_WRITE -> errno %d", errno);
	if (bad)
		ibv_dereg_mr(bad);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "create_comp_channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	CHECK(cq, "create_cq handle %u cqe %d errno %d", cq ? cq->handle : 0, cq ? cq->cqe : 0,
	      cq ? 0 : errno);
	struct ibv_cq *big = ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0);
	CHECK(!big && errno == EINVAL, "create_cq max_cqe+1 -> errno %d", errno);
	if (big)
		ibv_destroy_cq(big);
	if (!pd || !mr || !cq)
		return 1;

	struct ibv_wc wc[4];
	errno = 0;
	int n = ibv_poll_cq(cq, 4, wc);
	CHECK(n == 0 || n < 0, "poll_cq = %d errno %d (never 95 = dummy)", n, errno);
	int r = ibv_req_notify_cq(cq, 0);
	CHECK(r == 0 || r == EOPNOTSUPP, "req_notify_cq = %d", r);
	r = ibv_resize_cq(cq, 64);
	CHECK(r == 0, "resize_cq(64) = %d, cqe now %d", r, cq->cqe);

	struct ibv_qp *qp = rc_qp(pd, cq, IBV_QPT_RC);
	CHECK(qp, "create_qp RC qpn %u errno %d", qp ? qp->qp_num : 0, qp ? 0 : errno);
	struct ibv_qp *ud = rc_qp(pd, cq, IBV_QPT_UD);
	CHECK(ud, "create_qp UD qpn %u errno %d", ud ? ud->qp_num : 0, ud ? 0 : errno);
	struct ibv_qp *xrc = rc_qp(pd, cq, IBV_QPT_XRC_SEND);
	CHECK(!xrc, "create_qp XRC_SEND refused, errno %d", errno);
	if (xrc)
		ibv_destroy_qp(xrc);
	CHECK(!qp || !ibv_qp_to_qp_ex(qp), "ibv_qp_to_qp_ex(legacy QP) is NULL");

	struct ibv_qp_init_attr_ex ax = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
	};
	struct ibv_qp *qpx = ibv_create_qp_ex(ctx, &ax);
	CHECK(qpx, "create_qp_ex(PD|CREATE_FLAGS) qpn %u errno %d", qpx ? qpx->qp_num : 0, qpx ? 0 : errno);
	ax.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *qpy = ibv_create_qp_ex(ctx, &ax);
	CHECK(!qpy && errno == EOPNOTSUPP, "create_qp_ex(SEND_OPS_FLAGS) -> errno %d", errno);
	if (qpy)
		ibv_destroy_qp(qpy);

	if (qp) {
		struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
					  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
		r = ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						   IBV_QP_ACCESS_FLAGS);
		CHECK(r == 0, "modify_qp RESET->INIT = %d", r);
		struct ibv_qp_init_attr ia;
		memset(&qa, 0, sizeof(qa));
		r = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &ia);
		CHECK(r == 0 && qa.qp_state == IBV_QPS_INIT, "query_qp = %d state %d max_send_wr %u",
		      r, qa.qp_state, qa.cap.max_send_wr);
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND },
				   *bad_wr = NULL;
		r = ibv_post_send(qp, &wr, &bad_wr);
		CHECK(r == EINVAL && bad_wr == &wr, "post_send before RTS = %d (EINVAL, bad_wr set)", r);
		/* INIT takes receives: into the ring (0), or EOPNOTSUPP from a kernel without one. */
		struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 },
				   *bad_rwr = NULL;
		r = ibv_post_recv(qp, &rwr, &bad_rwr);
		CHECK(r == 0 || (r == EOPNOTSUPP && bad_rwr == &rwr), "post_recv in INIT = %d", r);
	}

	/* SRQ: created with a ring, or refused cleanly by a kernel without SRQs. */
	struct ibv_srq_init_attr sia = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sia);
	CHECK(srq || errno == EOPNOTSUPP || errno == ENOSYS, "create_srq = %p errno %d",
	      (void *)srq, srq ? 0 : errno);
	struct ibv_qp *sqp = NULL;
	if (srq) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 },
				   *bad_rwr = NULL;
		r = ibv_post_srq_recv(srq, &rwr, &bad_rwr);
		CHECK(r == 0, "post_srq_recv = %d", r);
		struct ibv_srq_attr sa;
		r = ibv_query_srq(srq, &sa);
		CHECK(r == 0, "query_srq = %d max_wr %u", r, sa.max_wr);
		sa.srq_limit = 1;
		r = ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT);
		CHECK(r == 0, "modify_srq(LIMIT) = %d", r);
		struct ibv_qp_init_attr a = {
			.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 8, .max_send_sge = 1 },
		};
		sqp = ibv_create_qp(pd, &a);
		CHECK(sqp, "create_qp on the SRQ errno %d", sqp ? 0 : errno);
		if (sqp) {
			struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
			r = ibv_modify_qp(sqp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
							    IBV_QP_ACCESS_FLAGS);
			CHECK(r == 0, "modify_qp (SRQ QP) RESET->INIT = %d", r);
			bad_rwr = NULL;
			r = ibv_post_recv(sqp, &rwr, &bad_rwr);
			CHECK(r == EINVAL && bad_rwr == &rwr, "post_recv on an SRQ QP = %d (EINVAL)", r);
		}
	}

	/* An AH to our own GID (RoCE: the kernel resolves the MAC). */
	struct ibv_ah *ah = NULL;
	for (int gi = 0; gi < 8 && !ah; gi++) {
		union ibv_gid gid;
		if (ibv_query_gid(ctx, 1, gi, &gid))
			break;
		if (!gid.global.interface_id && !gid.global.subnet_prefix)
			continue;
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
					  .grh = { .dgid = gid, .sgid_index = gi, .hop_limit = 64 } };
		ah = ibv_create_ah(pd, &aa);
		CHECK(ah, "create_ah gid index %d handle %u errno %d", gi, ah ? ah->handle : 0,
		      ah ? 0 : errno);
	}
	struct ibv_ah_attr nogrh = { .port_num = 1, .dlid = 1 };
	struct ibv_ah *ah2 = ibv_create_ah(pd, &nogrh);
	CHECK(!ah2, "create_ah without GRH on RoCE refused, errno %d", errno);
	if (ah2)
		ibv_destroy_ah(ah2);

	r = ibv_dealloc_pd(pd);
	CHECK(r != 0, "dealloc_pd with live objects refused = %d", r);

	if (ah)
		CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	if (sqp)
		CHECK(!ibv_destroy_qp(sqp), "destroy_qp on the SRQ");
	if (srq)
		CHECK(!ibv_destroy_srq(srq), "destroy_srq");
	if (qpx)
		CHECK(!ibv_destroy_qp(qpx), "destroy_qp (ex)");
	if (ud)
		CHECK(!ibv_destroy_qp(ud), "destroy_qp UD");
	if (qp)
		CHECK(!ibv_destroy_qp(qp), "destroy_qp RC");
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	CHECK(!ibv_close_device(ctx), "close_device");
	ibv_free_device_list(list);
	free(buf);
	printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
	return failures ? 1 : 0;
}
