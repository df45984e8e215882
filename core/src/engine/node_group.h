/* A run's node processes on a cloud (docs/cluster.md), what every engine that starts
 * processes shares: the graph engine's roles and the pipeline's stages. A private
 * directory for the run's sockets, this program's path for the nodes' command line,
 * Ctrl-C caught while nodes run (the coordinator ends them itself), the cloud's events
 * read for a node that ended, and the end: the nodes' exits awaited, the rest terminated,
 * the directory removed. */
#ifndef BIVOUAC_ENGINE_NODE_GROUP_H
#define BIVOUAC_ENGINE_NODE_GROUP_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/cloud.h"
#include "bivouac/error.h"
#include "bivouac/plugin.h"
#include "bivouac/transport.h"

/* A directory of mode 0700 for the run's sockets (and files only its nodes read): under
 * $TMPDIR when its path leaves room for the socket names (a unix socket path has at most
 * 107 bytes), else under /tmp. */
bv_status bv_node_group_make_dir(char *dir, size_t len, bv_error *err);
/* Removes the directory's files and the directory (a warning if it cannot). */
void bv_node_group_remove_dir(const char *dir);
/* This program's path (or override, when not NULL), for the nodes' command lines. */
bv_status bv_node_group_self_exe(const char *override, char *exe, size_t len, bv_error *err);

/* While nodes run, SIGINT and SIGTERM only set a flag (nesting counted: every _on needs
 * its _off); bv_node_group_interrupted says which signal came, 0 none. */
void bv_node_group_signals_on(void);
void bv_node_group_signals_off(void);
int bv_node_group_interrupted(void);

/* Reads the cloud's events: 1 when one of nodes[0, count) exited or was preempted (its
 * index in *member, its id in *id, its wait status or -1 in *status; nodes[*member]
 * becomes -1), 2 when capacity came (BV_CLOUD_OFFERED: the next launch gets it), 3 when
 * capacity offered before is gone again (BV_CLOUD_WITHDRAWN), 0 when none of these, -1
 * with err set when the cloud cannot say. */
int bv_node_group_poll(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int count,
                       int *member, int64_t *id, int32_t *status, bv_error *err);
/* How a node ended, as words: "was killed by signal 9 (Killed)", "exited with status 1". */
void bv_node_group_exit_text(int32_t status, char *buf, size_t len);
/* Waits up to `seconds` for the nodes still running (nodes[i] >= 0) to exit after the
 * caller told them to; a node that ends with a status other than 0 is logged with its
 * name (name(i), ctx). */
void bv_node_group_await_exits(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes,
                               int count, double seconds,
                               void (*name)(void *ctx, int member, char *buf, size_t len),
                               void *ctx);
/* A fresh CURVE keypair for a run whose links go over TCP, from the transport plugin's
 * export (zmq's bv_zmq_curve_keypair): secret (41 bytes, Z85) is what every node of the
 * run holds, and nothing else may connect. `what` names the setting in the error when the
 * transport has no keys ("cluster.links: tcp"). */
bv_status bv_node_group_run_key(const bv_plugin *transport, const char *what, char *secret,
                                bv_error *err);

/* A coordinator of node processes gives up a send after this long, looks at its nodes,
 * and tries again until the transport's own send bound. */
#define BV_SEND_SLICE_MS 100

/* This process's transport: the experiment's options, and with a run key (secret not
 * empty) every link CURVE-authenticated and encrypted with it; send_slice_ms > 0 bounds
 * each send to that many milliseconds (a coordinator that looks at its nodes between
 * tries), where the options' own bound is longer or none. */
bv_status bv_node_group_transport(const bv_transport_ops *ops, const bv_opts *opts,
                                  const char *secret, int send_slice_ms, bv_transport **out,
                                  bv_error *err);

/* ---- in a node process ----
 * What a node removes when SIGTERM (the cloud's terminate) or the death of the
 * coordinator (the local cloud's PR_SET_PDEATHSIG) ends it: every socket file of the run,
 * the book and the run's directory, so a coordinator killed outright leaves nothing
 * behind. _begin forgets earlier ones and names the directory (the book's; NULL: no
 * directory, no book: a function worker removes only its own sockets); _add takes an
 * ipc:// address (its socket file) or a plain path, and ignores anything else; _arm
 * installs the handler. */
void bv_node_group_term_cleanup_begin(const char *book);
void bv_node_group_term_cleanup_add(const char *addr_or_path);
void bv_node_group_term_cleanup_arm(void);

/* Stops nodes[member] at once if it still runs (the cloud's kill, else its terminate; no
 * event follows), ends its charge and marks it gone (-1): a node that hangs, while the
 * run goes on. */
void bv_node_group_kill(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int member);
/* Terminates the nodes still running (each marked gone, -1), and the cloud stays: a run
 * that starts its nodes again on it (a pipeline's restart from a checkpoint). */
void bv_node_group_end_nodes(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes,
                             int count);
/* Terminates the nodes still running and destroys the cloud (which joins its readers, so
 * every line of the nodes' output is out). */
void bv_node_group_end(const bv_cloud_ops *ops, bv_cloud *cloud, int64_t *nodes, int count);
/* The cloud's launch (cloud.h), and the node is paid for from now until it ends (the run's
 * ledger, ledger.h) as an instance of req->node_type (NULL: the run's cost.instance). */
int64_t bv_node_group_launch(const bv_cloud_ops *ops, bv_cloud *cloud,
                             const bv_node_request *req, char *address, size_t address_len,
                             bv_error *err);

#endif
