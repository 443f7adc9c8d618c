"""Device limits that more than one layer enforces (verbs checks a request, the transport a packet)."""

MAX_MSG_SZ = 0x800000  # the port's largest message: 8 MiB, as rxe (RXE_PORT_MAX_MSG_SZ)
MAX_INLINE_DATA = 400  # bytes an inline send may carry (rxe's RXE_MAX_INLINE_DATA)
# Multicast (rxe_param.h): groups on the device, QPs attached to one group, attachments in all
MAX_MCAST_GRP = 8192
MAX_MCAST_QP_ATTACH = 56
MAX_TOTAL_MCAST_QP_ATTACH = MAX_MCAST_GRP * MAX_MCAST_QP_ATTACH  # 0x70000, as rxe: the others bound it
