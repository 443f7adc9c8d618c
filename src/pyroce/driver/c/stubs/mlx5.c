/* pyroce's libmlx5.so.1: the direct verbs perftest imports (mlx5dv.h of rdma-core 44), each
 * answering as the real library does for a device that is not a ConnectX: EOPNOTSUPP, returned
 * or in errno with NULL. The real libmlx5 cannot load beside pyroce's libibverbs (it needs
 * libibverbs' private provider interface), and perftest only calls these for DC, AES-XTS and
 * DEVX queries, which pyroce0 (an unknown vendor part) never asks it for. */
#include <errno.h>
#include <stddef.h>

#define STUB_EXPORT __attribute__((visibility("default")))

struct ibv_context;
struct ibv_device;
struct ibv_qp;
struct ibv_qp_ex;

STUB_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *context, void *qp_attr, void *mlx5_qp_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

STUB_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device, void *attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

STUB_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *context, const void *in, size_t inlen, void *out,
					size_t outlen)
{
	return EOPNOTSUPP;
}

STUB_EXPORT void *mlx5dv_create_mkey(void *mkey_init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

STUB_EXPORT int mlx5dv_destroy_mkey(void *mkey)
{
	return EOPNOTSUPP;
}

/* the real one is a cast (an mlx5 QP holds its mlx5dv_qp_ex): no QP of pyroce's holds one */
STUB_EXPORT void *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *qp)
{
	errno = EOPNOTSUPP;
	return NULL;
}

STUB_EXPORT int mlx5dv_crypto_login(struct ibv_context *context, void *login_attr)
{
	return EOPNOTSUPP;
}

STUB_EXPORT void *mlx5dv_dek_create(struct ibv_context *context, void *init_attr)
{
	errno = EOPNOTSUPP;
	return NULL;
}

STUB_EXPORT int mlx5dv_dek_destroy(void *dek)
{
	return EOPNOTSUPP;
}
