/* `bivouac profile EXP.yaml`: a short real run of the experiment whose directory is the
 * workload profile `bivouac simulate` reads (simulate.profile, docs/simulation.md). The
 * experiment runs as `bivouac run` runs it, for --steps steps, its pipeline's stages as
 * processes of the local cloud (the nodes the simulation stands for; its own cloud, sim
 * or none, is replaced unless a -s cloud... says otherwise). Then it prints what the
 * profile says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "sim.h"

#define MAX_ARGS 600

int bv_cli_profile(int argc, char **argv)
{
    const char *experiment = NULL, *out = NULL;
    long long steps = 50;
    bool own_cloud = false; /* a -s cloud... of the user's: theirs, not the local cloud */
    char *args[MAX_ARGS];
    int n = 0;
    args[n++] = "run";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool takes_value = !strcmp(arg, "-s") || !strcmp(arg, "--set") ||
                           !strcmp(arg, "--out") || !strcmp(arg, "--steps");
        if (takes_value && i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        if (!strcmp(arg, "--steps")) {
            if (bv_cli_int_arg(arg, argv[++i], 1, 1000000, &steps))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--out")) {
            out = argv[++i];
        } else if (!strcmp(arg, "-s") || !strcmp(arg, "--set")) {
            if (n + 2 >= MAX_ARGS - 12)
                return bv_cli_fail(BV_EXIT_USAGE, "too many -s overrides");
            args[n++] = argv[i];
            args[n++] = argv[++i];
            own_cloud |= strncmp(argv[i], "cloud=", 6) == 0 || strncmp(argv[i], "cloud.", 6) == 0;
        } else if (arg[0] == '-') {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)", arg);
        } else if (!experiment) {
            experiment = arg;
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unexpected argument '%s'", arg);
        }
    }
    if (!experiment)
        return bv_cli_fail(BV_EXIT_USAGE, "profile needs an experiment file: bivouac profile "
                           "EXP.yaml");
    char dir[4096], steps_set[64];
    if (out) {
        snprintf(dir, sizeof dir, "%s", out);
    } else {
        time_t t = time(NULL);
        struct tm tm;
        localtime_r(&t, &tm);
        char stamp[32];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
        snprintf(dir, sizeof dir, "runs/profile-%s", stamp);
    }
    snprintf(steps_set, sizeof steps_set, "train.steps=%lld", steps);
    args[n++] = (char *)experiment;
    args[n++] = "--out";
    args[n++] = dir;
    args[n++] = "--quiet";
    args[n++] = "--no-plot";
    args[n++] = "-s";
    args[n++] = steps_set;
    if (!own_cloud) {
        args[n++] = "-s";
        args[n++] = "cloud={plugin: local}"; /* stages as processes: the simulated nodes */
    }
    args[n] = NULL;
    int code = bv_cli_run(n, args);
    if (code != BV_EXIT_OK)
        return code;
    bv_sim_profile p;
    bv_error err = {0};
    if (bv_sim_profile_read(dir, &p, &err) != BV_OK)
        return bv_cli_fail(BV_EXIT_USAGE, "%s", err.msg);
    printf("profile %s: a step %.4f s at %d stage%s x %d pipeline%s, %g samples a pipeline "
           "and step\n", dir, p.step, p.stages, p.stages == 1 ? "" : "s", p.pipelines,
           p.pipelines == 1 ? "" : "s", p.samples_per_step);
    printf("simulate it: bivouac simulate EXP.yaml -s simulate.profile=%s\n", dir);
    return BV_EXIT_OK;
}
