package io.croupier.client;

import io.croupier.proto.BatchHeader;
import java.nio.ByteBuffer;

/**
 * One batch ready to push: its partition, its encoded 36-byte header (digest included) and its
 * data. A revive resends the same object, so the same batch id and digest, to the new location.
 *
 * @param partition the partition
 * @param header the 36 header bytes
 * @param data the data (empty in a seal)
 */
record OutBatch(int partition, byte[] header, ByteBuffer data) {
  /** A batch of {@code data[off, off+len)} (not copied: the caller hands it over). */
  static OutBatch of(byte[] key, int partition, int map, int attempt, int batchId, byte[] data, int off, int len) {
    BatchHeader h = BatchHeader.data(key, map, attempt, batchId, data, off, len);
    return new OutBatch(partition, encode(h), ByteBuffer.wrap(data, off, len).slice());
  }

  /** A seal: {@code count} data batches were sent to {@code partition}. */
  static OutBatch seal(byte[] key, int partition, int map, int attempt, int count) {
    return new OutBatch(partition, encode(BatchHeader.sealOf(key, map, attempt, count)), ByteBuffer.allocate(0));
  }

  private static byte[] encode(BatchHeader h) {
    ByteBuffer b = ByteBuffer.allocate(BatchHeader.SIZE);
    h.writeTo(b);
    return b.array();
  }

  /** Bytes on the wire: header and data. */
  int size() {
    return BatchHeader.SIZE + data.remaining();
  }
}
