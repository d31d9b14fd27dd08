/* The Linux loader (linux.c) and its platform tables and CPUID
 * (linux_tables.c) as the tests see them; their calls of each other are
 * in machine_int.h. */
#ifndef US_MACHINE_LINUX_H
#define US_MACHINE_LINUX_H

#include "machine/machine.h"

#define LINUX_HEAD_BYTES  (64u << 10)   /* read of a bzImage's setup part */
#define LINUX_EBDA_GPA    0x9fc00ull    /* the MP table */
#define LINUX_BIOS_GPA    0xe0000ull    /* ACPI tables, up to 1 MiB */
#define LINUX_E820_RAM      1
#define LINUX_E820_RESERVED 2

/* Writes the platform tables for m's vCPUs and devices into guest RAM;
 * *rsdp the ACPI RSDP's address (0: none). */
int linux_tables_build(struct machine *m, uint64_t *rsdp) US_MUST_CHECK;

#endif
