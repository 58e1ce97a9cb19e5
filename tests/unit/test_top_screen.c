// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats top's screen (cli/top_views.c): a VM's title line before its
 * second reading has no interval to give its rates over, so it says so
 * instead of "rates/0 s". The drawing helpers of cli/top_ui.c are
 * replaced by ones that keep the text.
 */
#include "unit.h"

#include <math.h>

/* The views are built into kvmstats; the test takes them the same way
 * test_plan_out.c takes plan's. */
#include "../../cli/top_views.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/top_model.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/render.c" // NOLINT(bugprone-suspicious-include)
#include "../../cli/sanitize.c" // NOLINT(bugprone-suspicious-include)

static char drawn[4096];

/* What top_views.c needs of cli/top_ui.c and cli/demo.c. */
void ui_put(int y, int x, int attr, const char *fmt, ...)
{
	size_t used = strlen(drawn);
	va_list ap;

	(void)y, (void)x, (void)attr;
	va_start(ap, fmt);
	vsnprintf(drawn + used, sizeof(drawn) - used, fmt, ap);
	va_end(ap);
	used = strlen(drawn);
	snprintf(drawn + used, sizeof(drawn) - used, "\n");
}

void ui_bar_line(int y, const char *text)
{
	ui_put(y, 0, 0, "%s", text);
}

void ui_hist_bar(struct top_ui *ui, int y, int x, int width,
		 const struct kvmstats_stat *st, const uint64_t *h)
{
	(void)ui, (void)y, (void)x, (void)width, (void)st, (void)h;
}

struct top_vm *ui_cur_vm(const struct top_ui *ui)
{
	return ui->m->nvms ? ui->m->vms[0] : NULL;
}

size_t ui_visible_vms(const struct top_ui *ui, struct top_vm **out)
{
	for (size_t i = 0; i < ui->m->nvms; i++)
		out[i] = ui->m->vms[i];
	return ui->m->nvms;
}

void ui_open_input(struct top_ui *ui, int which)
{
	(void)ui, (void)which;
}

const char *demo_hint(void)
{
	return "";
}

static const struct kvmstats_encode_desc descs[] = {
	{ "exits", KVMSTATS_FLAGS(KVMSTATS_TYPE_CUMULATIVE, KVMSTATS_UNIT_NONE, 0), 0, 1, 0 },
};

static void feed(struct top_model *m, struct kvmstats_schema *s, uint64_t t,
		 uint64_t exits)
{
	uint64_t data[1] = { exits };
	struct top_vm *vm;

	model_begin(m);
	vm = model_vm(m, 1, 0);
	assert_non_null(vm);
	vm->pid = 1;
	snprintf(vm->id, sizeof(vm->id), "kvm-1");
	assert_int_equal(series_feed(m, &vm->stats, s, data, t * 1000000000ull, false), 0);
	series_missing(&vm->stats, NULL);
	model_end(m, t * 1000000000ull);
}

static void test_title_one_reading(void **state)
{
	struct kvmstats_ctx *ctx = kvmstats_ctx__new(NULL);
	struct top_opts o = { .interval = 2 };
	struct top_model m;
	struct top_ui ui = { .o = &o, .m = &m };
	struct kvmstats_schema *s;
	uint64_t values[1] = { 0 };
	size_t len;
	void *img = kvmstats_image__encode("kvm-1", descs, 1, values, &len, NULL);

	(void)state;
	assert_non_null(img);
	s = kvmstats_schema__parse(ctx, img, len, NULL, 0);
	assert_non_null(s);
	COLS = 120;
	model_init(&m, false);
	feed(&m, s, 1, 10);
	drawn[0] = 0;
	vm_title(&ui, 0, m.vms[0]);
	print_message("%s", drawn);
	assert_null(strstr(drawn, "rates/0 s"));
	assert_non_null(strstr(drawn, "no rates yet"));
	/* The second reading: the interval it spans. */
	feed(&m, s, 3, 20);
	drawn[0] = 0;
	vm_title(&ui, 0, m.vms[0]);
	print_message("%s", drawn);
	assert_non_null(strstr(drawn, "rates/2 s"));
	model_free(&m);
	kvmstats_schema__put(s);
	free(img);
	kvmstats_ctx__free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_title_one_reading),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
