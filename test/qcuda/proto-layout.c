/* Prints the layout of guest-driver/include/qcuda_proto.h as JSON, so the
 * TypeScript mirror can be checked against the C source of truth. */
#include <stddef.h>
#include <stdio.h>
#include "qcuda_proto.h"

#define F(s, f) printf("\"%s.%s\":%zu,", #s, #f, offsetof(struct s, f))
#define S(s) printf("\"%s\":%zu,", #s, sizeof(struct s))
#define V(n) printf("\"%s\":%llu,", #n, (unsigned long long)(n))

int main(void) {
	printf("{");
	S(virtio_qcuda_config);
	F(virtio_qcuda_config, magic); F(virtio_qcuda_config, proto_version); F(virtio_qcuda_config, num_queues);
	F(virtio_qcuda_config, queue_size); F(virtio_qcuda_config, capabilities); F(virtio_qcuda_config, reserved);
	S(qcuda_req_hdr); F(qcuda_req_hdr, cmd); F(qcuda_req_hdr, len); F(qcuda_req_hdr, session);
	S(qcuda_resp_hdr); F(qcuda_resp_hdr, status); F(qcuda_resp_hdr, len); F(qcuda_resp_hdr, value);
	V(VIRTIO_ID_QCUDA); V(QCUDA_MAGIC); V(QCUDA_PROTO_VERSION); V(QCUDA_CONFIG_SIZE); V(QCUDA_CAP_GPU);
	V(QCUDA_CMD_NOP); V(QCUDA_ST_BAD_REQUEST); V(QCUDA_ST_UNKNOWN_CMD); V(QCUDA_ST_TOO_LARGE);
	printf("\"end\":0}\n");
	return 0;
}
