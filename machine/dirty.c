/* The machine's dirty pages: page bitmaps, the harvest of KVM's dirty log
 * (re-protecting what it reports, the VMM's own writes added), the hot set
 * a harvest leaves writable, and the pages RAM's memfd holds. machine.c
 * allocates the bitmaps with the RAM and frees them with the machine. */
#include "machine/machine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG "machine"

static size_t bitmap_words(uint64_t npages)
{
	return (size_t)((npages + 63) / 64);
}

size_t machine_bitmap_words(const struct machine *m)
{
	return bitmap_words(m->ram_pages);
}

uint64_t machine_bitmap_count(const uint64_t *bm, size_t words)
{
	uint64_t n = 0;

	for (size_t w = 0; w < words; w++)
		n += (uint64_t)__builtin_popcountll(bm[w]);
	return n;
}

void machine_bitmap_fill(const struct machine *m, uint64_t *bm)
{
	size_t words = bitmap_words(m->ram_pages);

	memset(bm, 0xff, words * sizeof(uint64_t));
	if (m->ram_pages % 64)
		bm[words - 1] = (1ull << (m->ram_pages % 64)) - 1;
}

int64_t machine_gfn_page(const struct machine *m, uint64_t gfn)
{
	uint64_t high0 = MACHINE_HIGH_RAM_GPA >> 12;

	if (gfn < m->low_pages)
		return (int64_t)gfn;
	if (gfn >= high0 && gfn - high0 < m->ram_pages - m->low_pages)
		return (int64_t)(gfn - high0 + m->low_pages);
	return -1;
}

int machine_set_hot_budget(struct machine *m, uint64_t pages)
{
	if (pages && !m->hot) {
		m->hot = calloc(bitmap_words(m->ram_pages), sizeof(uint64_t));
		m->seen = calloc(m->ram_pages, sizeof(uint32_t));
		if (!m->hot || !m->seen) {
			free(m->hot);
			free(m->seen);
			m->hot = NULL;
			m->seen = NULL;
			return -ENOMEM;
		}
	}
	m->hot_budget = pages;
	return 0;
}

/* The hot set's part of a harvest: bitmap holds what this harvest reports
 * (hot pages included, their bits never cleared). A cold page reported now
 * and within the last MACHINE_HOT_WINDOW harvests was really rewritten
 * soon after its re-protection: it joins while there is budget. A hot page leaves after its term or when over
 * budget. What stays hot is then taken out of kvm_dirty (the slot's clear
 * mask), so KVM leaves it writable. */
static void hot_update(struct machine *m, const uint64_t *bitmap, size_t words, bool running)
{
	/* A harvest while the guest runs counts as the last pause's: pages join
	 * then as at a pause, none leaves (terms count pauses). */
	uint32_t h = running ? m->harvests : ++m->harvests;

	if (!m->hot)
		return;
	for (size_t w = 0; w < words; w++) {
		uint64_t d = running ? bitmap[w] & ~m->hot[w] : bitmap[w] | m->hot[w];

		while (d) {
			int b = __builtin_ctzll(d);
			uint64_t bit = 1ull << b, p = w * 64 + (uint64_t)b;

			d &= d - 1;
			if (m->hot[w] & bit) {
				if (h - m->seen[p] >= MACHINE_HOT_TERM || m->hot_pages > m->hot_budget) {
					m->hot[w] &= ~bit;
					m->hot_pages--;
					m->seen[p] = h;
				}
			} else {
				if (m->seen[p] && h - m->seen[p] <= MACHINE_HOT_WINDOW &&
				    m->hot_pages < m->hot_budget) {
					m->hot[w] |= bit;
					m->hot_pages++;
				}
				m->seen[p] = h;
			}
		}
	}
}

/* A harvest: what KVM reports in every slot, re-protected. On a paused
 * machine (running false) the hot set is updated and its pages reported
 * but left writable, and the VMM's own writes are added. While the guest
 * runs (a pre-copy) the hot pages are neither reported nor touched (the
 * pause reports them) and the VMM's writes stay for the pause. */
static int harvest(struct machine *m, uint64_t *bitmap, bool running)
{
	size_t words = bitmap_words(m->ram_pages);
	uint64_t first = 0;
	int r;

	memset(bitmap, 0, words * sizeof(uint64_t));
	/* What KVM reports, every slot, before anything is cleared (the hot set
	 * goes by guest writes only: a page the VMM wrote is not writable in
	 * KVM for being reported). */
	for (int s = 0; s < m->vm.nslots; s++) {
		uint64_t npages = m->vm.slots[s].size / KVM_PAGE_SIZE;
		size_t sw = bitmap_words(npages);

		memset(m->kvm_dirty, 0, sw * sizeof(uint64_t));
		if ((r = kvm_vm_get_dirty_log(&m->vm, s, m->kvm_dirty)) < 0) {
			log_error(TAG, "dirty log of slot %d: %s", s, strerror(-r));
			return r;        /* nothing taken: KVM and vmm_dirty still hold it all */
		}
		for (size_t w = 0; w < sw; w++)
			bitmap[first / 64 + w] |= m->kvm_dirty[w];
		first += npages;
	}
	hot_update(m, bitmap, words, running);
	if (running && m->hot)
		for (size_t w = 0; w < words; w++)
			bitmap[w] &= ~m->hot[w];   /* the pause reports them */
	/* Re-protect what was reported, less the hot pages. */
	first = 0;
	for (int s = 0; s < m->vm.nslots; s++) {
		uint64_t npages = m->vm.slots[s].size / KVM_PAGE_SIZE;
		size_t sw = bitmap_words(npages);
		uint64_t n = 0;     /* what this slot re-protects */

		for (size_t w = 0; w < sw; w++) {
			m->kvm_dirty[w] = bitmap[first / 64 + w] & ~(m->hot ? m->hot[first / 64 + w] : 0);
			n += (uint64_t)__builtin_popcountll(m->kvm_dirty[w]);
		}
		if ((r = kvm_vm_clear_dirty_log(&m->vm, s, m->kvm_dirty)) < 0) {
			log_error(TAG, "dirty log of slot %d: %s", s, strerror(-r));
			/* What was taken so far goes back: the next harvest has it. */
			machine_requeue_dirty(m, bitmap);
			return r;
		}
		m->stats.reprotected += n;
		first += npages;     /* slots start on 64-page boundaries (0 and 3 GiB) */
	}
	if (!running)
		for (size_t w = 0; w < words; w++)
			bitmap[w] |= atomic_exchange_explicit(&m->vmm_dirty[w], 0, memory_order_relaxed);
	return 0;
}

int machine_harvest_dirty(struct machine *m, uint64_t *bitmap)
{
	return harvest(m, bitmap, false);
}

int machine_harvest_running(struct machine *m, uint64_t *bitmap)
{
	return harvest(m, bitmap, true);
}

void machine_requeue_dirty(struct machine *m, const uint64_t *bitmap)
{
	size_t words = bitmap_words(m->ram_pages);

	for (size_t w = 0; w < words; w++)
		if (bitmap[w])
			atomic_fetch_or_explicit(&m->vmm_dirty[w], bitmap[w], memory_order_relaxed);
}

int machine_ram_populated(struct machine *m, uint64_t *bitmap)
{
	off_t end = (off_t)m->cfg.mem_bytes, data = 0, hole;

	memset(bitmap, 0, bitmap_words(m->ram_pages) * sizeof(uint64_t));
	while (data < end) {
		data = lseek(m->memfd, data, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno;
		hole = lseek(m->memfd, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		for (uint64_t p = (uint64_t)data / KVM_PAGE_SIZE;
		     p < ((uint64_t)hole + KVM_PAGE_SIZE - 1) / KVM_PAGE_SIZE && p < m->ram_pages; p++)
			bitmap[p / 64] |= 1ull << (p % 64);
		data = hole;
	}
	return 0;
}

