/* Checkpoint capture and apply: the epoch buffer, the dirty-page copy (the
 * pause-time cost), validation and the all-or-nothing apply. */
#include "checkpoint/checkpoint.h"

#include "kmod/mutant.h"
#include "proto/proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TAG "ckpt"

/* ---- buffers -------------------------------------------------------------- */

void ckpt_init(struct ckpt *c)
{
	memset(c, 0, sizeof(*c));
}

static void unmap_pages(struct ckpt *c)
{
	if (c->pages)
		munmap(c->pages, c->cap_pages * CKPT_PAGE_SIZE);
	c->pages = NULL;
}

void ckpt_fini(struct ckpt *c)
{
	unmap_pages(c);
	free(c->gfns);
	free(c->state);
	free(c->harvest);
	free(c->image);
	memset(c, 0, sizeof(*c));
}

void ckpt_reset(struct ckpt *c)
{
	c->npages = 0;
	c->state_len = 0;
	c->full = false;
	c->config_digest = 0;
}

/* Anonymous memory, prefaulted so that the copy in the pause never faults,
 * in huge pages where the kernel gives them: prefaulting 32 MiB a 4 KiB
 * page at a time took 13-23 ms here (every protect and migration waited
 * for it), in 2 MiB pages ~1.6 ms. Without MADV_POPULATE_WRITE (Linux <
 * 5.14) each page is touched instead; the mapping is new, nobody else
 * writes it. NULL when out of memory. */
static uint8_t *map_prefaulted(size_t bytes)
{
	uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE);   /* a hint: THP may be off */
	if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0)
		return p;
	if (errno != EINVAL) {            /* ENOMEM: no memory for it after all */
		munmap(p, bytes);
		return NULL;
	}
	for (size_t off = 0; off < bytes; off += CKPT_PAGE_SIZE)
		p[off] = 0;
	return p;
}

int ckpt_reserve(struct ckpt *c, size_t npages)
{
	size_t cap = c->cap_pages ? c->cap_pages : 256;
	uint8_t *pages;
	uint64_t *gfns;

	if (npages <= c->cap_pages)
		return 0;
	while (cap < npages)
		cap *= 2;
	pages = map_prefaulted(cap * CKPT_PAGE_SIZE);
	if (!pages)
		return -ENOMEM;
	gfns = realloc(c->gfns, cap * sizeof(*gfns));
	if (!gfns) {
		munmap(pages, cap * CKPT_PAGE_SIZE);
		return -ENOMEM;
	}
	if (c->npages)
		memcpy(pages, c->pages, c->npages * CKPT_PAGE_SIZE);
	unmap_pages(c);
	c->pages = pages;
	c->gfns = gfns;
	c->cap_pages = cap;
	return 0;
}

int ckpt_add_page(struct ckpt *c, uint64_t gfn, const void *data)
{
	int r;

	if (c->npages == c->cap_pages && (r = ckpt_reserve(c, c->npages + 1)) < 0)
		return r;
	c->gfns[c->npages] = gfn;
	memcpy(c->pages + c->npages * CKPT_PAGE_SIZE, data, CKPT_PAGE_SIZE);
	c->npages++;
	return 0;
}

int ckpt_set_state(struct ckpt *c, const void *blob, size_t len)
{
	if (len > c->cap_state) {
		uint8_t *n = realloc(c->state, len);

		if (!n)
			return -ENOMEM;
		c->state = n;
		c->cap_state = len;
	}
	if (len)   /* an empty state on a fresh ckpt: c->state is still NULL */
		memcpy(c->state, blob, len);
	c->state_len = len;
	return 0;
}

/* ---- capture ------------------------------------------------------------- */

/* Copies the pages set in bm, runs of adjacent pages in one memcpy. */
static void copy_dirty(struct machine *m, struct ckpt *c, const uint64_t *bm, size_t words)
{
	uint8_t *dst = c->pages;
	uint64_t *gfn = c->gfns;

	for (size_t w = 0; w < words; w++) {
		uint64_t bits = bm[w];

		while (bits) {
			unsigned b = (unsigned)__builtin_ctzll(bits);
			/* length of the run of ones starting at b */
			uint64_t shifted = bits >> b;
			unsigned run = shifted == ~0ull ? 64 - b : (unsigned)__builtin_ctzll(~shifted);
			uint64_t page = (uint64_t)w * 64 + b;

			memcpy(dst, machine_page_hva(m, page), (size_t)run * CKPT_PAGE_SIZE);
			dst += (size_t)run * CKPT_PAGE_SIZE;
			for (unsigned k = 0; k < run; k++)
				*gfn++ = machine_page_gfn(m, page + k);
			bits = run + b >= 64 ? 0 : bits & ~(((1ull << run) - 1) << b);
		}
	}
	c->npages = (size_t)(gfn - c->gfns);
}

/* The harvest bitmap and the copy's (two bitmaps of words words). */
static int harvest_bufs(struct ckpt *c, size_t words)
{
	if (c->harvest_words == words)
		return 0;
	free(c->harvest);
	c->harvest = calloc(words * 2, sizeof(uint64_t));
	if (!c->harvest) {
		c->harvest_words = 0;
		return -ENOMEM;
	}
	c->harvest_words = words;
	return 0;
}

int ckpt_capture(struct machine *m, struct ckpt *c, bool full)
{
	size_t words = (size_t)((m->ram_pages + 63) / 64);
	struct ckpt_image *img;
	uint64_t *copy_bm;
	uint64_t t0, t1, t2;
	size_t n;
	int r;

	if ((r = harvest_bufs(c, words)) < 0)
		return r;
	copy_bm = c->harvest + words;
	if (!c->image && !(c->image = malloc(sizeof(*c->image))))
		return -ENOMEM;
	img = c->image;
	ckpt_reset(c);
	c->config_digest = machine_config_digest(&m->cfg);
	c->full = full;

	/* Harvest clears the log before we copy: a write after this point is
	 * in the next harvest, never lost. */
	t0 = now_ns();
	if ((r = machine_harvest_dirty(m, c->harvest)) < 0)
		goto out;
	if (full)
		machine_bitmap_fill(m, copy_bm);
	else
		memcpy(copy_bm, c->harvest, words * sizeof(uint64_t));
	n = (size_t)machine_bitmap_count(copy_bm, words);
	if ((r = ckpt_reserve(c, n)) < 0) {
		ckpt_requeue(m, c);
		goto out;
	}
	t1 = now_ns();
	copy_dirty(m, c, copy_bm, words);
	/* make check-mutants: get, copy, then clear: writes to copied pages meanwhile are lost */
	if (MUTANT(clear_after_copy) && machine_harvest_dirty(m, c->harvest) == 0)
		for (size_t w = 0; w < words; w++)
			atomic_fetch_or(&m->vmm_dirty[w], c->harvest[w] & ~copy_bm[w]);
	t2 = now_ns();
	if ((r = ckpt_image_read(m, img)) < 0 || (r = ckpt_state_encode(c, img)) < 0) {
		ckpt_requeue(m, c);
		goto out;
	}
	c->stats.harvest_ns = t1 - t0;
	c->stats.copy_ns = t2 - t1;
	c->stats.state_ns = now_ns() - t2;
out:
	return r;
}

int ckpt_precopy(struct machine *m, struct ckpt *c)
{
	size_t words = (size_t)((m->ram_pages + 63) / 64);
	uint64_t t0, t1;
	int r;

	if ((r = harvest_bufs(c, words)) < 0)
		return r;
	ckpt_reset(c);
	c->config_digest = machine_config_digest(&m->cfg);
	/* Cleared (re-protected) before the copy: a page the guest writes while
	 * it is copied, torn or not, is in the pause's harvest and sent again. */
	t0 = now_ns();
	if ((r = machine_harvest_running(m, c->harvest)) < 0)
		return r;
	if ((r = ckpt_reserve(c, (size_t)machine_bitmap_count(c->harvest, words))) < 0) {
		ckpt_requeue(m, c);
		return r;
	}
	t1 = now_ns();
	copy_dirty(m, c, c->harvest, words);
	c->stats.harvest_ns = t1 - t0;
	c->stats.copy_ns = now_ns() - t1;
	return 0;
}

int ckpt_take(struct machine *m, struct ckpt *c, bool full)
{
	uint64_t t0, t1;
	int r;

	/* A full capture's buffer is allocated and faulted in before the pause. */
	if (full && (r = ckpt_reserve(c, m->ram_pages)) < 0)
		return r;
	t0 = now_ns();
	machine_pause(m);
	t1 = now_ns();
	r = ckpt_capture(m, c, full);
	machine_resume(m);
	c->stats.stop_ns = t1 - t0;
	c->stats.pause_ns = now_ns() - t0;
	return r;
}

void ckpt_requeue(struct machine *m, const struct ckpt *c)
{
	if (!c->harvest || c->harvest_words != (m->ram_pages + 63) / 64)
		return;
	for (size_t w = 0; w < c->harvest_words; w++) {
		uint64_t bits = c->harvest[w];

		if (bits)
			atomic_fetch_or_explicit(&m->vmm_dirty[w], bits, memory_order_relaxed);
	}
}

/* ---- validate and apply ---------------------------------------------------- */

/* Checks what KVM would otherwise refuse half-way through an apply. */
static int check_host_fit(struct machine *m, const struct ckpt_image *img)
{
	const struct kvm_sys *sys = &m->sys;

	for (int i = 0; i < img->ncpus; i++) {
		const struct kvm_vcpu_state *v = &img->vcpus[i];

		if (v->xsave_size != (uint32_t)sys->xsave_size) {
			log_error(TAG, "vCPU %d: xsave area of %u bytes, this host uses %d", i,
				  v->xsave_size, sys->xsave_size);
			return -EINVAL;
		}
		for (uint32_t k = 0; k < v->nmsrs; k++) {
			bool known = false;

			for (uint32_t j = 0; j < sys->nmsrs && !known; j++)
				known = sys->msrs[j] == v->msrs[k].index;
			if (!known) {
				log_error(TAG, "vCPU %d: MSR 0x%x is not restorable on this host", i,
					  v->msrs[k].index);
				return -EINVAL;
			}
		}
	}
	return 0;
}

static int validate(struct machine *m, const struct ckpt *c, struct ckpt_image *img)
{
	uint64_t digest = machine_config_digest(&m->cfg);
	int r;

	if (c->config_digest != digest) {
		log_error(TAG, "checkpoint of machine %016llx, this machine is %016llx",
			  (unsigned long long)c->config_digest, (unsigned long long)digest);
		return -ESTALE;
	}
	if (c->full && c->npages != m->ram_pages) {
		log_error(TAG, "full checkpoint with %zu pages, machine has %llu", c->npages,
			  (unsigned long long)m->ram_pages);
		return -EBADMSG;
	}
	if (c->npages && (!c->gfns || !c->pages)) {
		log_error(TAG, "checkpoint lists pages without data");
		return -EBADMSG;
	}
	for (size_t i = 0; i < c->npages; i++)
		if (machine_gfn_page(m, c->gfns[i]) < 0) {
			log_error(TAG, "page %zu: gfn 0x%llx is outside guest RAM", i,
				  (unsigned long long)c->gfns[i]);
			return -ERANGE;
		}
	if ((r = ckpt_state_decode(c->state, c->state_len, digest, m->ncpus, img)) < 0)
		return r;
	return check_host_fit(m, img);
}

int ckpt_validate(struct machine *m, const struct ckpt *c)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	r = validate(m, c, img);
	free(img);
	return r;
}

int ckpt_apply(struct machine *m, const struct ckpt *c)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	if ((r = validate(m, c, img)) < 0)
		goto out;
	/* Memory first: nothing below reads it, but vCPU state refers to it. */
	for (size_t i = 0; i < c->npages; i++) {
		uint64_t page = (uint64_t)machine_gfn_page(m, c->gfns[i]);

		memcpy(machine_page_hva(m, page), c->pages + i * CKPT_PAGE_SIZE, CKPT_PAGE_SIZE);
		atomic_fetch_or_explicit(&m->vmm_dirty[page / 64], 1ull << (page % 64),
					 memory_order_relaxed);
	}
	/* Then the VM (irqchips, PIT, clock) and devices, whose post-load
	 * re-drives interrupt lines into the restored irqchip; then the vCPUs,
	 * whose LAPICs and pending events sit on top of the irqchip. */
	if ((r = machine_set_state(m, &img->ms)) < 0)
		goto err_kvm;
	for (int i = 0; i < m->ncpus; i++)
		if ((r = machine_set_vcpu_state(m, i, &img->vcpus[i])) < 0)
			goto err_kvm;
	if ((r = ckpt_state_post_load(m, img)) < 0)
		goto err_kvm;
	r = 0;
	goto out;
err_kvm:
	log_error(TAG, "KVM refused a validated checkpoint: %s; the target is inconsistent",
		  strerror(-r));
	r = -EIO;
out:
	free(img);
	return r;
}

/* ---- decoded access ---------------------------------------------------------- */

static int decode_own(const struct ckpt *c, struct ckpt_image *img)
{
	int ncpus = ckpt_state_ncpus(c->state, c->state_len);

	if (ncpus < 0)
		return ncpus;
	return ckpt_state_decode(c->state, c->state_len, c->config_digest, ncpus, img);
}

int ckpt_get_vcpu_state(const struct ckpt *c, int cpu, struct kvm_vcpu_state *st)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	r = decode_own(c, img);
	if (!r && (cpu < 0 || cpu >= img->ncpus))
		r = -EINVAL;
	if (!r)
		memcpy(st, &img->vcpus[cpu], sizeof(*st));
	free(img);
	return r;
}

int ckpt_put_vcpu_state(struct ckpt *c, int cpu, const struct kvm_vcpu_state *st)
{
	struct ckpt_image *img = malloc(sizeof(*img));
	int r;

	if (!img)
		return -ENOMEM;
	r = decode_own(c, img);
	if (!r && (cpu < 0 || cpu >= img->ncpus))
		r = -EINVAL;
	if (!r) {
		memcpy(&img->vcpus[cpu], st, sizeof(*st));
		r = ckpt_state_encode(c, img);
	}
	free(img);
	return r;
}
