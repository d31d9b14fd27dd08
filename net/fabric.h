/* net/ private, for net/rdma.c: libfabric, opened on first use, and one
 * reliable-datagram endpoint (FI_EP_RDM, FI_MSG | FI_RMA, sends ordered after writes)
 * with a receive ring registered for remote writes. */
#ifndef US_NET_FABRIC_H
#define US_NET_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "kmod/log.h"

#define NET_FAB_DEFAULT_PROVIDER "verbs;ofi_rxm"
#define NET_FAB_FALLBACK_PROVIDER "tcp;ofi_rxm"

struct net_fab {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;         /* transmit and receive completions */
	struct fid_ep *ep;
	struct fid_mr *mr;
	uint8_t *ring;             /* the peer writes here */
	int wait_fd;               /* the CQ's wait fd, or -1: poll it */
};

/* Opens everything on a zeroed f, on the device of the local address node.
 * prov: a provider, or NULL for NET_FAB_DEFAULT_PROVIDER falling back
 * (logged) to NET_FAB_FALLBACK_PROVIDER. 0 or -errno / -FI_* (logged
 * where the cause would not be clear from it); net_fab_close() either way. */
int net_fab_open(struct net_fab *f, const char *prov, const char *node, size_t ring_bytes,
		 size_t cq_size) US_MUST_CHECK;
void net_fab_close(struct net_fab *f);
const char *net_fab_strerror(int err);

#endif
