/* A task gate for tests/integration/staleness.sh: lets intervals run up to one epoch ahead
 * of the slowest, and holds interval `interval`'s last step of epoch `epoch` (its
 * backward of stage 0) until another interval has been let into the next epoch. So, every
 * run, an interval's forward reads the weights before the update between the epochs and
 * its backward runs after that update has landed: what weight stashing is for. */
#include <stdbool.h>
#include <stdlib.h>

#include "bivouac/plugin.h"
#include "bivouac/resilience.h"

struct bv_resilience {
    int64_t interval, epoch;
    bool released;
};

static bv_resilience *hold_create(const bv_opts *opts, const bv_run_info *info, bv_error *err)
{
    (void)info;
    bv_resilience *r = calloc(1, sizeof *r);
    if (!r) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->interval = bv_opts_int(opts, "interval");
    r->epoch = bv_opts_int(opts, "epoch");
    return r;
}

static void hold_destroy(bv_resilience *r)
{
    free(r);
}

static bv_status hold_before_task(bv_resilience *r, const bv_task_info *task,
                                  bv_task_decision *out, bv_error *err)
{
    if (task->size < offsetof(bv_task_info, slowest_epoch) + sizeof task->slowest_epoch)
        return bv_error_set(err, BV_ERR_PLUGIN, "hold needs plugin ABI 1.11");
    out->run_now = task->epoch - task->slowest_epoch <= 1;
    if (out->run_now && task->epoch > r->epoch && task->interval != r->interval)
        r->released = true;
    if (task->interval == r->interval && task->epoch == r->epoch && task->backward &&
        task->stage == 0 && !r->released)
        out->run_now = false;
    return BV_OK;
}

static const bv_resilience_ops hold_ops = {
    .create = hold_create,
    .destroy = hold_destroy,
    .before_task = hold_before_task,
};

static const bv_option hold_options[] = {
    BV_OPT_INT_RANGE("interval", "0", 0, 1 << 20, "the interval to hold back"),
    BV_OPT_INT_RANGE("epoch", "1", 0, 1 << 20, "the epoch (0-based) in which to hold it"),
    BV_OPT_END,
};

static const bv_plugin hold_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_RESILIENCE, "hold", "0.1.0",
                     "test gate: holds one interval's last step until another runs ahead"),
    .options = hold_options,
    .ops = &hold_ops,
    .ops_size = sizeof hold_ops,
};

BV_PLUGIN_ENTRY(resilience, hold, hold_plugin)
