package io.croupier.client;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

/**
 * One batch a reader kept: the payload a writer pushed ({@link MapWriter#pushBatch}) for
 * {@code partition} from the winning attempt of {@code mapId}.
 *
 * @param mapId the map that wrote it
 * @param partition the partition it belongs to
 * @param data the batch's bytes, as pushed
 */
public record Batch(int mapId, int partition, byte[] data) {
  /**
   * The records of a batch made by {@link MapWriter#write} or the Python SDK: each a u32
   * little-endian length and that many bytes (PROTOCOL §5.1).
   *
   * @throws IllegalStateException when the data is not in that framing
   */
  public List<byte[]> records() {
    List<byte[]> out = new ArrayList<>();
    ByteBuffer buf = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
    while (buf.hasRemaining()) {
      if (buf.remaining() < 4) {
        throw new IllegalStateException("batch of map " + mapId + " ends inside a record length");
      }
      int n = buf.getInt();
      if (n < 0 || n > buf.remaining()) {
        throw new IllegalStateException("batch of map " + mapId + " has a record past its end");
      }
      byte[] rec = new byte[n];
      buf.get(rec);
      out.add(rec);
    }
    return out;
  }
}
