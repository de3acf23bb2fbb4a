package io.croupier.proto;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.commons.codec.digest.Blake3;

/**
 * The 36-byte batch header (PROTOCOL §5.1), little-endian: map_id, attempt_id, batch_id, length,
 * flags (bit 0 SEAL), and a 16-byte digest = BLAKE3 keyed by the app key (plain without a
 * secret) over header[0:20] ‖ data.
 *
 * @param mapId the map
 * @param attemptId the map attempt
 * @param batchId counts per (attempt, partition) from 0; in a seal, how many batches were sent
 * @param length bytes of data after the header (0 in a seal)
 * @param flags {@link #SEAL} or 0
 * @param digest the 16-byte digest
 */
public record BatchHeader(int mapId, int attemptId, int batchId, int length, int flags, byte[] digest) {
  /** The header's size. */
  public static final int SIZE = 36;
  /** The SEAL flag. */
  public static final int SEAL = 1;

  /** Whether this is a seal. */
  public boolean seal() {
    return (flags & SEAL) != 0;
  }

  /** A data batch's header, its digest computed over {@code data[off, off+len)}. */
  public static BatchHeader data(byte[] key, int map, int attempt, int batch, byte[] data, int off, int len) {
    byte[] first = prefix(map, attempt, batch, len, 0);
    return new BatchHeader(map, attempt, batch, len, 0, digest(key, first, data, off, len));
  }

  /** A seal's header: {@code count} data batches were sent. */
  public static BatchHeader sealOf(byte[] key, int map, int attempt, int count) {
    byte[] first = prefix(map, attempt, count, 0, SEAL);
    return new BatchHeader(map, attempt, count, 0, SEAL, digest(key, first, null, 0, 0));
  }

  /** The first 20 bytes, the part the digest covers. */
  public static byte[] prefix(int map, int attempt, int batch, int length, int flags) {
    return ByteBuffer.allocate(20).order(ByteOrder.LITTLE_ENDIAN)
        .putInt(map).putInt(attempt).putInt(batch).putInt(length).putInt(flags).array();
  }

  /** The digest of a header's first 20 bytes and its data. */
  public static byte[] digest(byte[] key, byte[] first20, byte[] data, int off, int len) {
    Blake3 h = Blake3s.hasher(key).update(first20);
    if (len > 0) {
      h.update(data, off, len);
    }
    return h.doFinalize(16);
  }

  /** Whether {@code data[off, off+length)} matches this header's digest under {@code key}. */
  public boolean verify(byte[] key, byte[] data, int off) {
    byte[] want = digest(key, prefix(mapId, attemptId, batchId, length, flags), data, off, length);
    return java.security.MessageDigest.isEqual(want, digest);
  }

  /** Writes the 36 bytes into {@code out}. */
  public void writeTo(ByteBuffer out) {
    out.order(ByteOrder.LITTLE_ENDIAN).putInt(mapId).putInt(attemptId).putInt(batchId).putInt(length)
        .putInt(flags).put(digest);
  }

  /** Parses 36 bytes at {@code buf}'s position (advancing it). */
  public static BatchHeader read(ByteBuffer buf) {
    ByteBuffer b = buf.order(ByteOrder.LITTLE_ENDIAN);
    int map = b.getInt();
    int attempt = b.getInt();
    int batch = b.getInt();
    int length = b.getInt();
    int flags = b.getInt();
    byte[] digest = new byte[16];
    b.get(digest);
    return new BatchHeader(map, attempt, batch, length, flags, digest);
  }
}
