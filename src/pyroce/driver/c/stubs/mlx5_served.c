/* The direct verbs pyroce's libmlx5.so.1 answers for pyroce0: each asks pyroce's libibverbs.so.1
 * (c/mlx5dv.c, its PYROCE_PRIVATE_1 node), which knows its own objects. The references are weak,
 * so this library loads wherever the stubs load: beside another libibverbs (or none, as ctypes
 * loads it) they are NULL and each verb answers as its stub does, "not this device". */
#include <infiniband/mlx5dv.h>

#include "stubs.h"

#define WEAK __attribute__((weak))
/* pyroce's answer where its libibverbs is loaded, else the stub's (errno EOPNOTSUPP, `otherwise`) */
#define SERVE(verb, otherwise, ...)                                                                                 \
	do {                                                                                                         \
		if (pyroce_##verb)                                                                                   \
			return pyroce_##verb(__VA_ARGS__);                                                           \
		errno = EOPNOTSUPP;                                                                                  \
		return otherwise;                                                                                    \
	} while (0)
extern bool pyroce_mlx5dv_is_supported(struct ibv_device *device) WEAK;
extern int pyroce_mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs) WEAK;
extern int pyroce_mlx5dv_init_obj(struct mlx5dv_obj *obj, uint64_t obj_type, int abi_1_0) WEAK;
extern struct ibv_qp *pyroce_mlx5dv_create_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
					       struct mlx5dv_qp_init_attr *mlx5_attr) WEAK;
extern struct ibv_cq_ex *pyroce_mlx5dv_create_cq(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr,
						  struct mlx5dv_cq_init_attr *mlx5_attr) WEAK;

STUB_EXPORT bool mlx5dv_is_supported(struct ibv_device *device)
{
	SERVE(mlx5dv_is_supported, false, device);
}

STUB_EXPORT int mlx5dv_query_device(struct ibv_context *context, struct mlx5dv_context *attrs)
{
	SERVE(mlx5dv_query_device, EOPNOTSUPP, context, attrs);
}

static int init_obj(struct mlx5dv_obj *obj, uint64_t obj_type, int abi_1_0)
{
	SERVE(mlx5dv_init_obj, EOPNOTSUPP, obj, obj_type, abi_1_0);
}

/* MLX5_1.0's gave cq_uar as a void ** (rdma-core's COMPAT_SYMVER_FUNC), MLX5_1.2's the register */
STUB_EXPORT int mlx5dv_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t obj_type)
{
	return init_obj(obj, obj_type, 1);
}
__asm__(".symver mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");

STUB_EXPORT int mlx5dv_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t obj_type)
{
	return init_obj(obj, obj_type, 0);
}
__asm__(".symver mlx5dv_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");

STUB_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr,
					    struct mlx5dv_qp_init_attr *mlx5_attr)
{
	SERVE(mlx5dv_create_qp, NULL, context, attr, mlx5_attr);
}

STUB_EXPORT struct ibv_cq_ex *mlx5dv_create_cq(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr,
					       struct mlx5dv_cq_init_attr *mlx5_attr)
{
	SERVE(mlx5dv_create_cq, NULL, context, attr, mlx5_attr);
}
