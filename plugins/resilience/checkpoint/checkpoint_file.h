/* The checkpoint file format (docs/checkpoint-format.md): encoding a bv_state into a file
 * image, writing it atomically, reading and checking it back, and finding the newest good
 * checkpoint in a directory. */
#ifndef BIVOUAC_CHECKPOINT_FILE_H
#define BIVOUAC_CHECKPOINT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/plugin.h"
#include "bivouac/resilience.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BV_CKPT_MAGIC "BVCK"
#define BV_CKPT_END_MAGIC "BVCE"
#define BV_CKPT_VERSION 1
#define BV_CKPT_HEADER_SIZE 40 /* as written by this version; readers accept larger */
#define BV_CKPT_TRAILER_SIZE 8 /* end magic, then the CRC-32C of every byte before it */
#define BV_CKPT_NAME_MAX 4096  /* longest blob name, in bytes */

/* ---- Exported: other programs (e.g. `bivouac sample --checkpoint DIR`) dlsym these in
 * resilience_checkpoint.so, or get them from the descriptor's get_proc_address under the
 * names "read_file", "write_file" and "restore_dir". ---- */

/* The plugin's entry symbol (checkpoint.c). */
BV_PLUGIN_EXPORT const bv_plugin *bv_resilience_checkpoint_plugin(void);

/* Reads and checks one checkpoint file; out gets malloc'd names and data (free it with
 * bv_state_free). A file that fails a check gives BV_ERR_CORRUPT with
 *   "checkpoint <path> is damaged (<reason>)"
 * and an unreadable one BV_ERR_IO. out is left empty on failure. */
BV_PLUGIN_EXPORT bv_status bv_checkpoint_read_file(const char *path, bv_state *out,
                                                   bv_error *err);
typedef bv_status (*bv_checkpoint_read_file_fn)(const char *path, bv_state *out,
                                                bv_error *err);

/* Writes state to <dir>/ckpt-<epoch as %08lld>.bvck atomically: through a temporary file
 * <dir>/.ckpt-XXXXXX.tmp that is fsync'ed, renamed and followed by an fsync of dir. */
BV_PLUGIN_EXPORT bv_status bv_checkpoint_write_file(const char *dir, const bv_state *state,
                                                    bv_error *err);
typedef bv_status (*bv_checkpoint_write_file_fn)(const char *dir, const bv_state *state,
                                                 bv_error *err);

/* Fills out with the newest checkpoint in dir that passes every check. Damaged files are
 * reported with bv_log(BV_LOG_WARN, ...) and skipped. None: BV_ERR_IO with
 *   "no usable checkpoint in <dir>" */
BV_PLUGIN_EXPORT bv_status bv_checkpoint_restore_dir(const char *dir, bv_state *out,
                                                     bv_error *err);
typedef bv_status (*bv_checkpoint_restore_dir_fn)(const char *dir, bv_state *out,
                                                  bv_error *err);

/* ---- Internal to the plugin (hidden in the .so; its tests link the objects). ---- */

/* "ckpt-00000042.bvck" into buf. */
void checkpoint_file_name(int64_t epoch, char *buf, size_t len);
/* Parses a checkpoint file name; false for anything else (temporary files included). */
bool checkpoint_parse_name(const char *name, int64_t *epoch);

/* Size of the file image of state; BV_ERR_INVALID if a blob cannot be stored (empty or
 * over-long name, a blob with a size but no data). */
bv_status checkpoint_image_size(const bv_state *state, size_t *size, bv_error *err);
/* Lays out header and blobs into image (checkpoint_image_size bytes) without the CRC:
 * this is the copy epoch_end pays for. */
void checkpoint_image_fill(const bv_state *state, unsigned char *image, size_t size);
/* Computes and stores the trailer CRC (done on the writer thread). */
void checkpoint_image_seal(unsigned char *image, size_t size);
/* Writes a sealed image to <dir>/ckpt-<epoch>.bvck atomically. */
bv_status checkpoint_image_write(const char *dir, int64_t epoch, const unsigned char *image,
                                 size_t size, bv_error *err);

/* Reads and checks path. On BV_ERR_CORRUPT err->msg is only the reason ("bad magic",
 * "CRC-32C mismatch: ..."); on BV_ERR_IO it is "<path>: <strerror>". out may be NULL to
 * check the file without keeping its contents. */
bv_status checkpoint_read(const char *path, bv_state *out, bv_error *err);

/* The checkpoints in dir, newest first (epochs only). ENOENT gives count 0. */
bv_status checkpoint_list(const char *dir, int64_t **epochs, size_t *count, bv_error *err);

#ifdef __cplusplus
}
#endif
#endif
