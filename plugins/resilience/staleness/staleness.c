/* The `staleness` resilience strategy (Dorylus §5, §7.3; docs/staleness.md): with it the
 * graph server runs each training pass interval by interval, and asks this gate before
 * every step whether it may run now. The modes are only answers:
 *   nopipe  every step waits until every interval has finished the step before it: no
 *           two stages ever overlap (Dorylus's no-pipe, Figure 10);
 *   pipe    a gather (forward or backward) waits for every interval; the tensor tasks of
 *           one interval go on as soon as its own gather is done, so inside a layer the
 *           graph server's gathers and the workers' tasks overlap;
 *   async   a forward gather runs as soon as the neighbour rows it reads are from a pass
 *           at most `s` epochs before this one; with s = 0 only this pass's rows will do,
 *           but an interval waits only for the intervals it has neighbours in, not for
 *           all of them, so intervals of different layers overlap. An interval may also
 *           run ahead into the next epoch(s) while others finish this one, up to `s`
 *           epochs beyond the slowest (its backward then uses the weights its forward
 *           read: the engine's weight stashing).
 * The engine never lets a gather read rows a task is writing, and a backward gather
 * always reads the complete gradient of this pass: those are the engine's, not a mode's.
 * `s` is a knob a policy can turn between epochs: set = {["staleness.s"] = 1}. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/plugin.h"
#include "bivouac/resilience.h"

typedef enum mode { NOPIPE, PIPE, ASYNC } mode;

struct bv_resilience {
    mode mode;
    int64_t s;
};

static bv_resilience *staleness_create(const bv_opts *opts, const bv_run_info *info,
                                       bv_error *err)
{
    (void)info;
    bv_resilience *r = calloc(1, sizeof *r);
    if (!r) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const char *m = bv_opts_str(opts, "mode");
    r->mode = strcmp(m, "nopipe") == 0 ? NOPIPE : strcmp(m, "pipe") == 0 ? PIPE : ASYNC;
    r->s = bv_opts_int(opts, "s");
    return r;
}

static void staleness_destroy(bv_resilience *r)
{
    free(r);
}

static bv_status staleness_before_task(bv_resilience *r, const bv_task_info *task,
                                       bv_task_decision *out, bv_error *err)
{
    if (task->size < offsetof(bv_task_info, slowest_epoch) + sizeof task->slowest_epoch)
        return bv_error_set(err, BV_ERR_PLUGIN, "staleness needs a core of plugin ABI 1.11 "
                            "(a task's input epoch, the intervals it waits for, the slowest "
                            "interval's epoch)");
    if (task->engine != BV_ENGINE_GRAPH)
        return BV_OK;
    bool gather = task->kind == BV_TASK_GATHER;
    int64_t ahead = task->epoch - task->slowest_epoch;
    switch (r->mode) {
    case NOPIPE: out->run_now = ahead == 0 && task->waiting == 0; break;
    case PIPE: out->run_now = ahead == 0 && (!gather || task->waiting == 0); break;
    case ASYNC:
        out->run_now = ahead <= r->s &&
                       (!gather || task->backward || task->input_epoch >= task->epoch - r->s);
        break;
    }
    return BV_OK;
}

static bv_status staleness_set_knob(bv_resilience *r, const char *name, double value,
                                    bv_error *err)
{
    if (strcmp(name, "s") != 0)
        return bv_error_set(err, BV_ERR_INVALID, "staleness has one knob, s, not '%s'", name);
    if (!(value >= 0 && value <= 1000) || value != floor(value))
        return bv_error_set(err, BV_ERR_INVALID, "staleness.s must be a whole number of "
                            "epochs in [0, 1000], not %g", value);
    if (r->mode != ASYNC)
        return bv_error_set(err, BV_ERR_INVALID, "staleness.s bounds mode async; this run's "
                            "mode is %s", r->mode == PIPE ? "pipe" : "nopipe");
    r->s = (int64_t)value;
    return BV_OK;
}

static const bv_resilience_ops staleness_ops = {
    .create = staleness_create,
    .destroy = staleness_destroy,
    .before_task = staleness_before_task,
    .set_knob = staleness_set_knob,
};

static const bv_option staleness_options[] = {
    BV_OPT_CHOICE("mode", "async", "nopipe|pipe|async",
                  "nopipe: no two stages overlap; pipe: a barrier at each gather, tasks of "
                  "a layer overlap the gathers; async: a gather reads neighbour rows at "
                  "most s epochs old, and an interval may run up to s epochs ahead (its "
                  "backward on the weights its forward read)"),
    BV_OPT_INT_RANGE("s", "0", 0, 1000,
                     "async: how many epochs older than the pass a neighbour's rows may be "
                     "(0: this pass's; a policy may change it: set = {[\"staleness.s\"] = 1})"),
    BV_OPT_END,
};

static const bv_plugin staleness_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_RESILIENCE, "staleness", "0.1.0",
                     "Dorylus's bounded asynchrony for graph models: the graph server runs "
                     "a training pass interval by interval, overlapping stages as the mode "
                     "allows"),
    .options = staleness_options,
    .ops = &staleness_ops,
    .ops_size = sizeof staleness_ops,
};

BV_PLUGIN_ENTRY(resilience, staleness, staleness_plugin)
