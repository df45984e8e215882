/* bivouac schedule: the instruction list of every stage of a pipeline (issue 14: 1F1B or
 * GPipe, P stages, M microbatches) and how they run together with given forward and
 * backward costs: the step's time, the bubble, the activations each stage holds
 * (core/src/engine/pipeline/schedule_gen.h). From an experiment's `pipeline:` section,
 * each stage's layers and a cost in proportion to them (pipeline_plan.h), or, with
 * `partition: balanced`, the stages cut from a profiling pass and its measured costs
 * (engine/seq/pipeline_profile.c). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipeline_plan.h"
#include "pipeline_seq.h"
#include "plugin_arrays.h"
#include "plot.h"
#include "registry.h"
#include "schedule_gen.h"

#define MAX_OVERRIDES 64

typedef struct schedule_args {
    long long stages, microbatches;
    bv_schedule_kind kind;
    bool kind_given;
    double forward, backward;
    const char *out; /* the timeline picture, .png (the .svg beside it) */
    const char *experiment;
    char *overrides[MAX_OVERRIDES];
    size_t noverrides;
    int first[BV_PIPELINE_MAX_STAGES + 1]; /* from an experiment: each stage's layers */
    bool measured; /* balanced: cost[] measured in a profiling pass (milliseconds) */
    bv_schedule_costs cost[BV_PIPELINE_MAX_STAGES];
} schedule_args;

static int parse_args(int argc, char **argv, schedule_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (arg[0] != '-') {
            if (a->experiment)
                return bv_cli_fail(BV_EXIT_USAGE, "schedule takes one experiment file, got "
                                   "'%s' and '%s'", a->experiment, arg);
            a->experiment = arg;
            continue;
        }
        if (i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        int rc = 0;
        if (!strcmp(arg, "-s") || !strcmp(arg, "--set"))
            rc = bv_cli_override_arg(argv[++i], a->overrides, &a->noverrides, MAX_OVERRIDES);
        else if (!strcmp(arg, "--stages"))
            rc = bv_cli_int_arg(arg, argv[++i], 1, 64, &a->stages);
        else if (!strcmp(arg, "--microbatches"))
            rc = bv_cli_int_arg(arg, argv[++i], 1, 4096, &a->microbatches);
        else if (!strcmp(arg, "--forward"))
            rc = bv_cli_number_arg(arg, argv[++i], 0, 1e9, &a->forward);
        else if (!strcmp(arg, "--backward"))
            rc = bv_cli_number_arg(arg, argv[++i], 0, 1e9, &a->backward);
        else if (!strcmp(arg, "--out"))
            a->out = argv[++i];
        else if (!strcmp(arg, "--kind")) {
            if (!bv_schedule_kind_parse(argv[++i], &a->kind))
                return bv_cli_fail(BV_EXIT_USAGE, "--kind is 1f1b or gpipe, got '%s'",
                                   argv[i]);
            a->kind_given = true;
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' for schedule", arg);
        }
        if (rc)
            return rc;
    }
    if (a->experiment && (a->stages || a->microbatches || a->kind_given))
        return bv_cli_fail(BV_EXIT_USAGE, "schedule takes its stages, microbatches and kind "
                           "from %s (set them with -s pipeline.stages=P and the like), not "
                           "from flags", a->experiment);
    if (!a->experiment && a->noverrides)
        return bv_cli_fail(BV_EXIT_USAGE, "-s needs an experiment file");
    if (!a->experiment && (!a->stages || !a->microbatches))
        return bv_cli_fail(BV_EXIT_USAGE, "schedule needs EXP.yaml, or --stages P and "
                           "--microbatches M");
    size_t n = a->out ? strlen(a->out) : 0;
    if (a->out && (n < 5 || strcmp(a->out + n - 4, ".png") != 0))
        return bv_cli_fail(BV_EXIT_USAGE, "--out names a .png file (the .svg goes beside "
                           "it), got '%s'", a->out);
    return 0;
}

static int box_kind(uint32_t op)
{
    return op == BV_INSTR_FORWARD || op == BV_INSTR_REDUNDANT_FORWARD     ? BV_PLOT_BOX_FORWARD
           : op == BV_INSTR_BACKWARD || op == BV_INSTR_REDUNDANT_BACKWARD ? BV_PLOT_BOX_BACKWARD
           : op == BV_INSTR_UPDATE                                         ? BV_PLOT_BOX_UPDATE
                                                                           : BV_PLOT_BOX_OTHER;
}

/* The timeline as a picture: a row of boxes per stage (the plot module draws it). */
static bv_status draw(const schedule_args *a, const bv_schedule *s,
                      const bv_schedule_timeline *t, bv_error *err)
{
    const char *why = NULL;
    const bv_plot_module *m = bv_cli_plot_module(&why);
    if (!m || m->struct_size < offsetof(bv_plot_module, draw_timeline) + sizeof(void *) ||
        !m->draw_timeline)
        return bv_error_set(err, BV_ERR_PLUGIN, "cannot draw %s: %s", a->out,
                            why ? why : "the plot module cannot draw timelines");
    bv_plot_lane *lanes = calloc((size_t)t->stages, sizeof *lanes);
    bv_status st = lanes ? BV_OK : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int i = 0; st == BV_OK && i < t->stages; i++) {
        bv_plot_box *b = calloc(s[i].count + 1, sizeof *b);
        if (!b) {
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            break;
        }
        for (size_t k = 0; k < s[i].count; k++) {
            const bv_instruction *ins = bv_schedule_at(&s[i], k);
            b[k] = (bv_plot_box){t->slot[i][k].start, t->slot[i][k].end, box_kind(ins->op),
                                 ins->microbatch};
        }
        lanes[i] = (bv_plot_lane){b, s[i].count};
    }
    char title[160], svg[4200];
    snprintf(title, sizeof title, "%s, %d stages, %lld microbatches: bubble %.1f %%",
             bv_schedule_kind_name(a->kind), t->stages, a->microbatches, 100.0 * t->bubble);
    snprintf(svg, sizeof svg, "%.*s.svg", (int)(strlen(a->out) - 4), a->out);
    if (st == BV_OK)
        st = m->draw_timeline(title, lanes, (size_t)t->stages, a->out, svg, err);
    if (st == BV_OK)
        printf("-> %s, %s\n", a->out, svg);
    for (int i = 0; lanes && i < t->stages; i++)
        free((void *)lanes[i].boxes);
    free(lanes);
    return st;
}

/* partition: balanced: a profiling pass cuts the blocks into stages (plan->first) and
 * gives each stage's measured forward and backward milliseconds, printed. */
static int profile(schedule_args *a, bv_experiment *x, const bv_pipeline_plan *plan)
{
    bv_error err = {0};
    void *data = bv_experiment_take_data(x);
    if (!data && x->engine_ops->load_data(x, &data, &err) != BV_OK)
        return bv_cli_fail(BV_EXIT_USAGE, "%s", err.msg);
    bv_seq_model_ops mops;
    bv_ops_copy(&mops, sizeof mops, x->model.plugin);
    bv_seq_pipe_cfg cfg;
    bv_seq_layer_cost cost[BV_PIPELINE_MAX_STAGES];
    bv_status st = bv_seq_pipe_cfg_make(x, data, &mops, (uint64_t)bv_opts_int(&x->train, "seed"),
                                        &cfg, &err);
    if (st == BV_OK)
        st = bv_seq_pipe_balance(&cfg, cost, &err);
    x->engine_ops->free_data(data);
    if (st != BV_OK)
        return bv_cli_fail(BV_EXIT_FAILED, "the profiling pass: %s", err.msg);
    a->measured = true;
    for (int s = 0; s < plan->stages; s++) {
        a->first[s + 1] = (int)cfg.span_end[s] - 1 - (s == plan->stages - 1);
        a->cost[s] = (bv_schedule_costs){.forward = 1e3 * cost[s].forward,
                                         .backward = 1e3 * cost[s].backward};
        printf("stage %d: forward %.2f ms, backward %.2f ms, %.1f MB a microbatch\n", s,
               1e3 * cost[s].forward, 1e3 * cost[s].backward, cost[s].bytes / 1e6);
    }
    return BV_EXIT_OK;
}

/* The pipeline an experiment describes: its stages, microbatches, schedule and each
 * stage's layers (printed), or an exit code. */
static int from_experiment(schedule_args *a)
{
    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    bv_pipeline_plan plan;
    int code = BV_EXIT_OK;
    bv_status st = bv_experiment_load(a->experiment, a->overrides, a->noverrides, reg, &x, &d);
    if (st == BV_OK)
        st = bv_pipeline_plan_make(x, &plan, &d);
    if (st != BV_OK) {
        bv_cli_print_diag(&d);
        code = st == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE;
    } else {
        a->stages = plan.stages;
        a->microbatches = plan.microbatches;
        a->kind = plan.kind;
        memcpy(a->first, plan.first, sizeof a->first);
        /* balanced: the profile's cut (profile() below replaces plan.first's) */
        if (strcmp(bv_opts_str(&x->pipeline, "partition"), "balanced") == 0 &&
            (code = profile(a, x, &plan)) != BV_EXIT_OK) {
            bv_diag_free(&d);
            bv_experiment_free(x);
            bv_registry_free(reg);
            return code;
        }
        printf("%s: %d layers of model %s in %d stages:", a->experiment, plan.layers,
               x->model.plugin->name, plan.stages);
        for (int s = 0; s < plan.stages; s++)
            printf(" [%d, %d)", a->first[s], a->first[s + 1]);
        printf(a->measured ? "; stage costs measured in a profiling pass\n"
                           : "; stage costs in proportion to their layers\n");
    }
    bv_diag_free(&d);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}

int bv_cli_schedule(int argc, char **argv)
{
    schedule_args a = {.kind = BV_SCHEDULE_1F1B, .forward = 1, .backward = 2};
    int rc = parse_args(argc, argv, &a);
    if (!rc && a.experiment)
        rc = from_experiment(&a);
    if (rc)
        return rc;
    int p = (int)a.stages, m = (int)a.microbatches;
    bv_schedule *s = calloc((size_t)p, sizeof *s);
    bv_schedule_costs *c = calloc((size_t)p, sizeof *c);
    bv_error err = {0};
    bv_status st = s && c ? BV_OK : bv_error_set(&err, BV_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p && st == BV_OK; i++) {
        bv_schedule_init(&s[i]);
        /* from an experiment: a stage costs its layers (each layer alike), or what the
         * profiling pass measured */
        double share = a.experiment ? a.first[i + 1] - a.first[i] : 1;
        c[i] = a.measured ? a.cost[i]
                          : (bv_schedule_costs){.forward = a.forward * share,
                                                .backward = a.backward * share};
        st = bv_schedule_generate(a.kind, i, p, m, &s[i], &err);
    }
    bv_schedule_timeline t = {0};
    if (st == BV_OK)
        st = bv_schedule_simulate(s, p, c, &t, &err);
    if (st == BV_OK) {
        if (a.measured)
            printf("%s, %d stages, %d microbatches (milliseconds as measured):\n",
                   bv_schedule_kind_name(a.kind), p, m);
        else
            printf("%s, %d stages, %d microbatches (%sforward %g, backward %g):\n",
                   bv_schedule_kind_name(a.kind), p, m, a.experiment ? "per layer: " : "",
                   a.forward, a.backward);
        for (int i = 0; i < p; i++) {
            printf("stage %d:", i);
            for (size_t k = 0; k < s[i].count; k++) {
                char label[32];
                bv_instruction_label(bv_schedule_at(&s[i], k), label, sizeof label);
                printf(" %s", label);
            }
            putchar('\n');
        }
        printf("step %g, bubble %.1f %%, activations held per stage:", t.makespan,
               100.0 * t.bubble);
        for (int i = 0; i < p; i++)
            printf(" %d", t.max_held[i]);
        putchar('\n');
        if (a.out)
            st = draw(&a, s, &t, &err);
    }
    bv_schedule_timeline_free(&t);
    for (int i = 0; s && i < p; i++)
        bv_schedule_free(&s[i]);
    free(s);
    free(c);
    return st == BV_OK ? BV_EXIT_OK : bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
}
