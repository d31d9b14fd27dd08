/* libfabric for the RDMA transport: loading it, picking a provider, and
 * opening one endpoint with its ring. See net/fabric.h. */
#include "net/fabric.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define TAG "net"
#define FI_API FI_VERSION(1, 9)

/* libfabric is opened on first use, not linked: loading it (and the verbs,
 * rdmacm and netlink libraries it pulls in) costs ~200 ms at every start of
 * the binary here, and only RDMA links need it. These are the only entry
 * points net/ calls; the rest of the API is inline through ops. */
static struct {
	int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
		       const struct fi_info *hints, struct fi_info **info);
	void (*freeinfo)(struct fi_info *info);
	struct fi_info *(*dupinfo)(const struct fi_info *info);
	int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
	const char *(*strerror)(int errnum);
	bool ok;
} fab;   /* written once under fab_once, read-only after */
static pthread_once_t fab_once = PTHREAD_ONCE_INIT;

static void load(void)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		log_error(TAG, "RDMA needs libfabric: %s (Debian: apt-get install libfabric1)", dlerror());
		return;
	}
	fab.getinfo = (__typeof__(fab.getinfo))dlsym(h, "fi_getinfo");
	fab.freeinfo = (__typeof__(fab.freeinfo))dlsym(h, "fi_freeinfo");
	fab.dupinfo = (__typeof__(fab.dupinfo))dlsym(h, "fi_dupinfo");
	fab.fabric = (__typeof__(fab.fabric))dlsym(h, "fi_fabric");
	fab.strerror = (__typeof__(fab.strerror))dlsym(h, "fi_strerror");
	fab.ok = fab.getinfo && fab.freeinfo && fab.dupinfo && fab.fabric && fab.strerror;
	if (!fab.ok)
		log_error(TAG, "libfabric.so.1 lacks the functions RDMA needs");
}

#define fi_getinfo fab.getinfo
#define fi_freeinfo fab.freeinfo
#define fi_fabric fab.fabric
#define fi_strerror fab.strerror
#define fi_allocinfo() fab.dupinfo(NULL)

#define fi_getinfo fab.getinfo
#define fi_freeinfo fab.freeinfo
#define fi_fabric fab.fabric
#define fi_strerror fab.strerror
#define fi_allocinfo() fab.dupinfo(NULL)

static struct fi_info *get_info(const char *prov, const char *node)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	int r;

	if (!hints)
		return NULL;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				      FI_MR_ENDPOINT;
	/* net/rdma.c: the message telling how far the writes go follows them */
	hints->tx_attr->msg_order = FI_ORDER_SAW;
	hints->rx_attr->msg_order = FI_ORDER_SAW;
	hints->fabric_attr->prov_name = strdup(prov);
	r = fi_getinfo(FI_API, node, NULL, FI_SOURCE, hints, &info);
	if (r == -FI_ENODATA && node)
		r = fi_getinfo(FI_API, NULL, NULL, 0, hints, &info);
	fi_freeinfo(hints);
	if (r) {
		log_debug(TAG, "RDMA provider %s: %s", prov, fi_strerror(-r));
		return NULL;
	}
	return info;
}

static int open_cq(struct net_fab *f, size_t size)
{
	struct fi_cq_attr attr = { .size = size, .format = FI_CQ_FORMAT_DATA,
				   .wait_obj = FI_WAIT_FD };
	int rc;

	f->wait_fd = -1;
	rc = fi_cq_open(f->domain, &attr, &f->cq, NULL);
	if (!rc && fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd) == 0)
		return 0;
	if (!rc)
		fi_close(&f->cq->fid);
	f->wait_fd = -1;
	attr.wait_obj = FI_WAIT_NONE;
	return fi_cq_open(f->domain, &attr, &f->cq, NULL);
}

/* Fabric, domain, AV, CQ, endpoint and the registered ring. */
static int open_link(struct net_fab *f, size_t ring_bytes, size_t cq_size)
{
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	uint64_t mr_mode = f->info->domain_attr->mr_mode;
	int rc;

	rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
	if (!rc)
		rc = fi_domain(f->fabric, f->info, &f->domain, NULL);
	if (!rc)
		rc = fi_av_open(f->domain, &av_attr, &f->av, NULL);
	if (!rc)
		rc = open_cq(f, cq_size);
	if (!rc)
		rc = fi_endpoint(f->domain, f->info, &f->ep, NULL);
	if (!rc)
		rc = fi_ep_bind(f->ep, &f->av->fid, 0);
	if (!rc)
		rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(f->ep);
	if (rc)
		return rc;
	if (posix_memalign((void **)&f->ring, 4096, ring_bytes))
		return -FI_ENOMEM;
	rc = fi_mr_reg(f->domain, f->ring, ring_bytes, FI_REMOTE_WRITE, 0, 0, 0, &f->mr, NULL);
	if (!rc && (mr_mode & FI_MR_ENDPOINT)) {
		rc = fi_mr_bind(f->mr, &f->ep->fid, 0);
		if (!rc)
			rc = fi_mr_enable(f->mr);
	}
	return rc;
}

/* Picks the provider; the fallback only when none was asked for. */
static int find_provider(struct net_fab *f, const char *asked, const char *node)
{
	const char *prov = asked ? asked : NET_FAB_DEFAULT_PROVIDER;

	f->info = get_info(prov, node);
	if (!f->info && !asked) {
		log_info(TAG, "RDMA: no %s device, using %s", NET_FAB_DEFAULT_PROVIDER,
			 NET_FAB_FALLBACK_PROVIDER);
		prov = NET_FAB_FALLBACK_PROVIDER;
		f->info = get_info(prov, node);
	}
	if (!f->info) {
		log_error(TAG, "RDMA: provider %s unavailable", prov);
		return -ENODEV;
	}
	return 0;
}

int net_fab_open(struct net_fab *f, const char *prov, const char *node, size_t ring_bytes,
		 size_t cq_size)
{
	int rc;

	f->wait_fd = -1;
	pthread_once(&fab_once, load);
	if (!fab.ok)
		return -ENOSYS;
	rc = find_provider(f, prov, node);
	if (!rc)
		rc = open_link(f, ring_bytes, cq_size);
	return rc;
}

void net_fab_close(struct net_fab *f)
{
	if (f->ep)
		fi_close(&f->ep->fid);
	if (f->mr)
		fi_close(&f->mr->fid);
	if (f->cq)
		fi_close(&f->cq->fid);
	if (f->av)
		fi_close(&f->av->fid);
	if (f->domain)
		fi_close(&f->domain->fid);
	if (f->fabric)
		fi_close(&f->fabric->fid);
	if (f->info)
		fi_freeinfo(f->info);
	free(f->ring);
	memset(f, 0, sizeof(*f));
	f->wait_fd = -1;
}

const char *net_fab_strerror(int err)
{
	return fab.ok ? fi_strerror(err) : strerror(err);
}
