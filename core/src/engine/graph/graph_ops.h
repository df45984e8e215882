/* The graph engine as the training loop sees it (bv_graph_engine_ops, engine.h): the
 * pieces graph_data.c (schemas, checks, loading the dataset) shares with graph_ops.c. */
#ifndef BIVOUAC_GRAPH_OPS_H
#define BIVOUAC_GRAPH_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/graph.h"
#include "engine.h"
#include "experiment.h"

extern const bv_option bv_graph_dataset_schema[];
extern const bv_option bv_graph_train_schema[];

/* engine.h's check and check_model for graph models. */
void bv_graph_check(bv_experiment *x, const bv_node *dataset, bool dataset_valid, bool clean,
                    bv_diag *diag);
bv_status bv_graph_check_model(const bv_experiment *x, bv_diag *diag);

/* dataset.feature_storage as the form bv_graph_features_convert takes. */
bv_features_form bv_graph_feature_storage(const bv_experiment *x);

/* The experiment's dataset, normalised and in the feature storage configured (the engine
 * makes sparse features dense for a model or back end that cannot take them). seed_offset is added to a synthetic
 * generator's seed (0 keeps the dataset fixed across --repeat seeds). */
bv_status bv_graph_load_data(const bv_experiment *x, uint64_t seed_offset,
                             bv_graph_dataset **out, bv_error *err);

/* `bivouac role`: serves one role of a cluster run (bv_graph_engine_serve) with the
 * experiment and, if this process loaded it, the data (NULL: the role loads what it
 * needs; a graph server of several reads its part from the run's directory). role is
 * "graph", "param" or "tensor". member (cluster.membership: etcd; NULL: none) is its
 * key in etcd (membership.h). */
bv_status bv_graph_serve_role(const bv_experiment *x, void *data, const char *role, int index,
                              uint64_t seed, const char *book, const char *member,
                              bv_error *err);

#endif
