/* 16550A UART at 0x3f8, IRQ 4 through the in-kernel irqchip. The receive
 * FIFO is deep (UART_RX_SIZE) so console input never drops; the transmitter
 * is always ready. Called with machine.lock held. */
#include "machine/devices.h"
#include "machine/machine_int.h"

#include <string.h>

#define UART_IRQ 4

enum { RBR_THR = 0, IER = 1, IIR_FCR = 2, LCR = 3, MCR = 4, LSR = 5, MSR = 6, SCR = 7 };

#define IER_RDA  0x01
#define IER_THRE 0x02
#define IIR_NONE 0x01
#define IIR_THRE 0x02
#define IIR_RDA  0x04
#define IIR_FIFO 0xc0
#define LCR_DLAB 0x80
#define LSR_DR   0x01
#define LSR_THRE 0x20
#define LSR_TEMT 0x40
#define MCR_LOOP 0x10

void uart_reset(struct uart_state *u)
{
	memset(u, 0, sizeof(*u));
	u->msr = 0xb0;   /* DCD, DSR, CTS */
	u->dll = 12;     /* 9600 baud */
}

bool uart_rx_ready(const struct uart_state *u)
{
	return u->rx_count > 0;
}

static uint8_t iir(const struct uart_state *u)
{
	uint8_t fifo = (u->fcr & 1) ? IIR_FIFO : 0;

	if ((u->ier & IER_RDA) && u->rx_count)
		return IIR_RDA | fifo;
	if ((u->ier & IER_THRE) && u->thr_irq)
		return IIR_THRE | fifo;
	return IIR_NONE | fifo;
}

static void update_irq(struct machine *m)
{
	uint8_t level = !(iir(&m->uart) & IIR_NONE);

	if (level != m->uart.irq_level) {
		m->uart.irq_level = level;
		if (kvm_vm_irq_line(&m->vm, UART_IRQ, level) < 0)
			log_warn("uart", "raising IRQ %d failed", UART_IRQ);
	}
}

void uart_post_load(struct machine *m)
{
	/* A fresh VM's line is low; drive it to what the state says. */
	uint8_t level = m->uart.irq_level;

	m->uart.irq_level = 0;
	if (level && kvm_vm_irq_line(&m->vm, UART_IRQ, 1) == 0)
		m->uart.irq_level = 1;
	update_irq(m);
}

size_t uart_rx_push(struct machine *m, const uint8_t *buf, size_t len)
{
	struct uart_state *u = &m->uart;
	size_t n = 0;

	while (n < len && u->rx_count < UART_RX_SIZE) {
		u->rx[(u->rx_head + u->rx_count) % UART_RX_SIZE] = buf[n++];
		u->rx_count++;
	}
	update_irq(m);
	return n;
}

static uint8_t rx_pop(struct machine *m)
{
	struct uart_state *u = &m->uart;
	uint8_t c;

	if (!u->rx_count)
		return 0;
	c = u->rx[u->rx_head];
	u->rx_head = (u->rx_head + 1) % UART_RX_SIZE;
	if (u->rx_count-- == UART_RX_SIZE && m->ops.console_room)
		m->ops.console_room(m->ops.ctx);
	return c;
}

static void write_reg(struct machine *m, int reg, uint8_t v)
{
	struct uart_state *u = &m->uart;

	switch (reg) {
	case RBR_THR:
		if (u->lcr & LCR_DLAB) {
			u->dll = v;
		} else if (u->mcr & MCR_LOOP) {
			uart_rx_push(m, &v, 1);
		} else {
			if (m->ops.console_out)
				m->ops.console_out(m->ops.ctx, &v, 1);
			u->thr_irq = 1;
		}
		break;
	case IER:
		if (u->lcr & LCR_DLAB) {
			u->dlm = v;
		} else {
			/* Enabling THRE with an empty transmitter raises it at once. */
			if ((v & IER_THRE) && !(u->ier & IER_THRE))
				u->thr_irq = 1;
			u->ier = v & 0x0f;
		}
		break;
	case IIR_FCR:
		u->fcr = v;
		if (v & 0x02) {   /* clear receive FIFO */
			bool was_full = u->rx_count == UART_RX_SIZE;

			u->rx_count = 0;
			u->rx_head = 0;
			if (was_full && m->ops.console_room)
				m->ops.console_room(m->ops.ctx);
		}
		break;
	case LCR:
		u->lcr = v;
		break;
	case MCR:
		u->mcr = v & 0x1f;
		break;
	case SCR:
		u->scr = v;
		break;
	default:
		break;
	}
}

static uint8_t read_reg(struct machine *m, int reg)
{
	struct uart_state *u = &m->uart;
	uint8_t v;

	switch (reg) {
	case RBR_THR:
		return (u->lcr & LCR_DLAB) ? u->dll : rx_pop(m);
	case IER:
		return (u->lcr & LCR_DLAB) ? u->dlm : u->ier;
	case IIR_FCR:
		v = iir(u);
		if ((v & 0x0f) == IIR_THRE)
			u->thr_irq = 0;   /* reading IIR acknowledges THRE */
		return v;
	case LCR:
		return u->lcr;
	case MCR:
		return u->mcr;
	case LSR:
		v = LSR_THRE | LSR_TEMT | (u->rx_count ? LSR_DR : 0) | u->lsr_err;
		u->lsr_err = 0;
		return v;
	case MSR:
		return u->msr;
	default:
		return u->scr;
	}
}

int uart_io(struct machine *m, uint16_t port, bool write, uint8_t *data)
{
	int reg = port & 7;

	if (write)
		write_reg(m, reg, *data);
	else
		*data = read_reg(m, reg);
	update_irq(m);
	return 0;
}

size_t machine_console_input(struct machine *m, const uint8_t *buf, size_t len)
{
	size_t n;

	pthread_mutex_lock(&m->lock);
	n = uart_rx_push(m, buf, len);
	if (n)
		pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	return n;
}

/* ---- on the bus ------------------------------------------------------------ */

static int uart_bus_io(struct machine *m, uint64_t addr, int size, bool write, uint8_t *data)
{
	(void)size;
	return uart_io(m, (uint16_t)addr, write, data);
}

static int uart_attach(struct machine *m)
{
	uart_reset(&m->uart);
	return machine_bus_add(m, MACHINE_PIO, UART_PORT, 8, uart_bus_io);
}

static void uart_save(struct machine *m, struct machine_state *st)
{
	st->uart = m->uart;
}

static void uart_load(struct machine *m, const struct machine_state *st)
{
	m->uart = st->uart;
	uart_post_load(m);
}

static bool uart_wake(const struct machine *m)
{
	return uart_rx_ready(&m->uart);
}

const struct machine_device uart_device = {
	"uart", uart_attach, NULL, uart_save, uart_load, uart_wake,
};
