/* TensorBoard event files written without TensorFlow: TFRecord framing around
 * hand-encoded Event protobufs holding scalar summaries. */
#ifndef GP_TB_EVENTS_H
#define GP_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct tb_writer;

/* Create logdir (one level) and start logdir/events.out.tfevents.<unix_time>.<host>
 * with the "brain.Event:2" version record; the file appears, complete, at close. */
int tb_writer_open(struct tb_writer **out, const char *logdir);
int tb_add_scalar(struct tb_writer *w, const char *tag, double value, long long step);
/* The same with the event's wall time (seconds since the epoch) given: for scalars
 * kept and written later, TensorBoard's relative-time axis reads when they happened. */
int tb_add_scalar_at(struct tb_writer *w, const char *tag, double value, long long step, double wall_time);
/* Write the file into place; the writer is freed even on error. */
int tb_writer_close(struct tb_writer *w);
/* The path of the event file (valid until close). */
const char *tb_writer_path(const struct tb_writer *w);

/* CRC-32C (Castagnoli), and the masked form TFRecord stores. */
uint32_t tb_crc32c(const void *data, size_t len);
uint32_t tb_crc_mask(uint32_t crc);

#endif
